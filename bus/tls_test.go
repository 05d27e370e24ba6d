package bus_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
)

// TestConnectTLS (issue 13 item 10): a server that requires TLS is reached
// with --nats-ca; without the CA the certificate is refused. The URL's
// credentials never appear in the error.
func TestConnectTLS(t *testing.T) {
	addr, caFile := bustest.StartJetStreamTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)

	conn, err := bus.Connect(ctx, "nats://"+addr, "tls-test", log, bus.WithTLS(bus.TLS{CAFile: caFile}))
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if !bus.NATS(conn).TLSRequired() {
		t.Error("connected without TLS")
	}
	if st, err := bus.NATS(conn).TLSConnectionState(); err != nil || !st.HandshakeComplete {
		t.Errorf("TLS state: %v, %v", st.HandshakeComplete, err)
	}
	conn.Close()

	_, err = bus.Connect(ctx, "tls://alice:pw-s3cr3t@"+addr, "tls-test", log)
	if err == nil {
		t.Fatal("a certificate from an unknown CA was accepted")
	}
	if strings.Contains(err.Error(), "pw-s3cr3t") || !strings.Contains(err.Error(), "REDACTED@") {
		t.Errorf("error %q: want the URL shown without its password", err)
	}
	// Waiting for a server (WithConnectTimeout, what services do) does not
	// retry a certificate its CA does not vouch for: no retry can fix it.
	if _, err := bus.Connect(ctx, "tls://"+addr, "tls-test", log, bus.WithConnectTimeout(0)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an unknown CA while waiting: err = %v, want the certificate error at once", err)
	}
	if _, err := bus.Connect(ctx, "nats://"+addr, "x", log, bus.WithTLS(bus.TLS{CertFile: caFile})); err == nil {
		t.Error("a client certificate without its key was accepted")
	}
}
