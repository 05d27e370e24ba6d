package bus_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
)

// TestStartMetricsAddressTaken (issue 17): a second worker of a kind on one
// host exited at once with "metrics listen :9102: bind: address already in
// use". A taken address is a warning and the connection is up; with
// WithMetricsRequired it is the error it used to be.
func TestStartMetricsAddressTaken(t *testing.T) {
	url := bustest.StartJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()

	var logs bustest.LogBuffer
	conn, m, err := bus.Start(ctx, url, "second", addr, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("a taken metrics address ended the service: %v", err)
	}
	defer conn.Close()
	if m == nil || !bus.NATS(conn).IsConnected() {
		t.Fatal("no metrics registry or no connection")
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "address already in use") {
		t.Errorf("no clear warning:\n%s", logs.String())
	}

	// Positive control: the option makes it an error.
	_, _, err = bus.Start(ctx, url, "strict", addr, slog.New(slog.DiscardHandler), bus.WithMetricsRequired(true))
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("WithMetricsRequired: err = %v, want the bind error", err)
	}
}

// TestStartMetricsFreePort: port 0 picks a free port, logs it, and serves
// /metrics there; two processes with it get two ports.
func TestStartMetricsFreePort(t *testing.T) {
	url := bustest.StartJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addrRE := regexp.MustCompile(`msg="metrics and health" addr=(127\.0\.0\.1:\d+)`)
	var got []string
	for i := range 2 {
		var logs bustest.LogBuffer
		conn, _, err := bus.Start(ctx, url, "worker", "127.0.0.1:0", slog.New(slog.NewTextHandler(&logs, nil)), bus.WithMetricsRequired(true))
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		defer conn.Close()
		mm := addrRE.FindStringSubmatch(logs.String())
		if mm == nil || strings.HasSuffix(mm[1], ":0") {
			t.Fatalf("worker %d: the chosen port is not logged:\n%s", i, logs.String())
		}
		resp, err := http.Get("http://" + mm[1] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("worker %d: /metrics at %s: %s", i, mm[1], resp.Status)
		}
		got = append(got, mm[1])
	}
	if got[0] == got[1] {
		t.Errorf("both workers on %s", got[0])
	}
}
