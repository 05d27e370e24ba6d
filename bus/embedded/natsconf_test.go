package embedded_test

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestDeployNATSConfListensOnLoopback (issue 13 item 10): deploy/nats/nats.conf
// listened on 0.0.0.0 with monitoring open. Parsed by nats-server itself.
func TestDeployNATSConfListensOnLoopback(t *testing.T) {
	// Authorisation is on: the users' passwords come from the environment.
	for _, u := range []string{"DISPATCHER", "LLM_WORKER", "SANDBOX_WORKER", "VERIFIER", "CLIENT", "TRAINER", "ADMIN"} {
		t.Setenv("MEDGYM_NATS_PASSWORD_"+u, "test")
	}
	o, err := server.ProcessConfigFile("../../deploy/nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if o.Host != "127.0.0.1" || o.Port != 4222 {
		t.Errorf("clients on %s:%d, want 127.0.0.1:4222", o.Host, o.Port)
	}
	if o.HTTPHost != "127.0.0.1" || o.HTTPPort != 8222 {
		t.Errorf("monitoring on %s:%d, want 127.0.0.1:8222", o.HTTPHost, o.HTTPPort)
	}
	if len(o.Users) == 0 || o.NoAuthUser != "" {
		t.Errorf("%d users, no_auth_user %q: authorisation is off", len(o.Users), o.NoAuthUser)
	}
	if !o.JetStream || o.MaxPayload != 8<<20 {
		t.Errorf("jetstream %v, max payload %d", o.JetStream, o.MaxPayload)
	}
}
