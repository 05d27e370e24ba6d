package bus_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
)

func TestAuthFromEnv(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	a, err := bus.AuthFromEnv(env(bus.EnvNATSUser, "verifier", bus.EnvNATSPasswordFile, pwFile))
	if err != nil || a.User != "verifier" || a.Password != "s3cret" {
		t.Fatalf("user + password file: %+v, %v", a, err)
	}
	if s := a.String(); strings.Contains(s, "s3cret") {
		t.Fatalf("String() shows the password: %s", s)
	}
	if a, err := bus.AuthFromEnv(env()); err != nil || a != (bus.Auth{}) {
		t.Fatalf("no variables: %+v, %v", a, err)
	}
	for name, getenv := range map[string]func(string) string{
		"user without password":    env(bus.EnvNATSUser, "verifier"),
		"password without user":    env(bus.EnvNATSPassword, "x"),
		"password twice":           env(bus.EnvNATSUser, "u", bus.EnvNATSPassword, "x", bus.EnvNATSPasswordFile, pwFile),
		"two methods":              env(bus.EnvNATSCreds, "/x.creds", bus.EnvNATSUser, "u", bus.EnvNATSPassword, "x"),
		"unreadable password file": env(bus.EnvNATSUser, "u", bus.EnvNATSPasswordFile, "/nonexistent/pw"),
	} {
		if _, err := bus.AuthFromEnv(getenv); err == nil || !strings.Contains(err.Error(), "NATS auth") {
			t.Errorf("%s: err = %v, want a NATS auth error", name, err)
		}
	}
}

// TestOrderedCleanupRefusal: the refused delete of an ordered consumer's
// reset (deploy/nats denies it to followers) is told apart from the other
// refusals, which Connect logs as errors.
func TestOrderedCleanupRefusal(t *testing.T) {
	for err, want := range map[string]bool{
		`nats: permissions violation: Permissions Violation for Publish to "$JS.API.CONSUMER.DELETE.MEDGYM_SCORES.x_1"`: true,
		`nats: permissions violation: Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.MEDGYM_SCORES.x_1"`: false,
		`nats: permissions violation: Permissions Violation for Publish to "medgym.episode.scored.r1"`:                  false,
		`nats: permissions violation: Permissions Violation for Subscription to "$JS.API.CONSUMER.DELETE.>"`:            false,
	} {
		if got := bus.IsOrderedCleanup(errors.New(err)); got != want {
			t.Errorf("%s: %v, want %v", err, got, want)
		}
	}
}

// TestInboxPrefixNamesTheUser: a connection's inboxes (reply subjects) are
// _INBOX.<user>. for a password login, whatever its role; _INBOX.<role>.
// when its credentials name no user; nats.go's default without either.
// deploy/nats lets each user subscribe to its own prefix only. A name that
// is not one subject token (it would nest under another user's prefix, or
// be a wildcard) is refused.
func TestInboxPrefixNamesTheUser(t *testing.T) {
	url := bustest.StartJetStream(t) // no authorisation: any user name logs in
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		opts []bus.ConnectOption
		want string
	}{
		{[]bus.ConnectOption{bus.WithAuth(bus.Auth{User: "client2", Password: "pw"}), bus.WithRole("client")}, "_INBOX.client2."},
		{[]bus.ConnectOption{bus.WithRole("verifier")}, "_INBOX.verifier."},
		{nil, "_INBOX."},
	} {
		conn, err := bus.Connect(t.Context(), url, "inbox", log, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got := bus.NATS(conn).NewInbox()
		conn.Close()
		if !strings.HasPrefix(got, c.want) || (c.want == "_INBOX." && strings.Count(got, ".") != 1) {
			t.Errorf("inbox %q, want under %s", got, c.want)
		}
	}
	for _, bad := range []bus.ConnectOption{bus.WithAuth(bus.Auth{User: "client.dispatcher", Password: "pw"}), bus.WithRole("*"), bus.WithRole(">"), bus.WithRole("a b")} {
		if _, err := bus.Connect(t.Context(), url, "inbox", log, bad); err == nil || !strings.Contains(err.Error(), "inbox prefix") {
			t.Errorf("a user or role that is no single token: %v", err)
		}
	}
}
