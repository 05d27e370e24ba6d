// Package bustest starts a real, in-process JetStream server for tests, like
// net/http/httptest does for HTTP.
package bustest

import (
	"testing"

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
