// Package bustest starts a real, in-process JetStream server for tests, like
// net/http/httptest does for HTTP.
package bustest

import (
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/medgym/medgym/bus/embedded"
)

// StartJetStream starts an embedded nats-server with JetStream storing under
// t.TempDir() and returns its client URL. It is shut down at test cleanup.
func StartJetStream(t testing.TB) string {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// UserNKey makes a NATS user key pair: the seed (what a client's
// MEDGYM_NATS_NKEY file holds) and the public key (what the server's
// authorization block lists).
func UserNKey(t testing.TB) (seed []byte, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err = kp.Seed()
	if err == nil {
		public, err = kp.PublicKey()
	}
	if err != nil {
		t.Fatal(err)
	}
	return seed, public
}
