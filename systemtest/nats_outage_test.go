package systemtest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
)

// natsOutage is how long TestNATSOutageMidRun keeps nats-server down:
// MEDGYM_NATS_OUTAGE (a duration), else 20 s, longer than every timeout
// of the loops it stops (the bus's 10 s bound on a NATS request, the
// dispatcher's 5 s retry cap, the CLI's 250 ms polling).
func natsOutage() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MEDGYM_NATS_OUTAGE")); err == nil {
		return d
	}
	return 20 * time.Second
}

// TestNATSOutageMidRun stops an external nats-server in the middle of a run
// and starts it again on the same store: the dispatcher's run loop, the
// workers, the verifier and `medgym run`'s follow ride it out; the run
// completes with every episode stored exactly once, without anyone's help.
// The services run under a context with a deadline, as a run with a
// timeout does: a NATS request whose reply the restart lost used to wait
// for that deadline in a handler that kept its message alive with
// in-progress acks, and the run stalled (the bus bounds every request now).
func TestNATSOutageMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps nats-server down for 20 s or more")
	}
	const (
		episodes  = 40
		stopAfter = 16
	)
	outage := natsOutage()
	natsBin := natsServerBinary(t)
	work := t.TempDir()
	logf, err := os.Create(filepath.Join(work, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	ns := &proc{t: t, name: "nats-server", log: logf, args: []string{natsBin, "-js", "-a", host, "-p", port, "-sd", filepath.Join(work, "nats")}}
	ns.start()
	defer ns.stop()
	waitListening(t, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute+outage)
	defer cancel()
	f := baseFlags(t)
	f.NATS = "nats://" + addr
	f.Limit, f.RunID, f.MaxInFlight, f.LogLevel = episodes, "natsout", 2, "info"
	logs := &syncBuffer{}
	conn, err := bus.Connect(ctx, f.NATS, "test", cli.NewLogger(logs, "warn"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	r := startRun(t, ctx, conn, f, logs)
	waitDone(t, ctx, conn, "natsout", stopAfter, r)
	ns.stop()
	t.Logf("nats-server stopped after %d+ episodes", stopAfter)
	select {
	case <-r.done:
		t.Fatalf("run ended while nats-server was down: %+v %v\n%s", r.res, r.err, tail(logs.String(), 6000))
	case <-time.After(outage):
	}
	ns.start()
	t.Logf("nats-server restarted after %s", outage)

	// The stall report is taken while the services still run (not once
	// ctx has stopped them), so it shows who holds what.
	deadline, _ := ctx.Deadline()
	select {
	case <-r.done:
	case <-time.After(time.Until(deadline) - 30*time.Second):
		natsLog, _ := os.ReadFile(filepath.Join(work, "nats.log"))
		t.Fatalf("run did not finish after nats-server came back\n%s\n%s\nnats-server:\n%s\nhandlers:\n%s", tail(logs.String(), 6000), stallReport(conn), tail(string(natsLog), 3000), handlerStacks())
	}
	if r.err != nil {
		t.Fatalf("run: %v\n%s", r.err, tail(logs.String(), 6000))
	}
	if r.res.Total != episodes || r.res.Outcomes[schemas.OutcomeCorrect] != episodes {
		t.Fatalf("outcomes %v of %d episodes, want %d correct", r.res.Outcomes, r.res.Total, episodes)
	}
	// The dispatcher's loop did meet the outage (else this proves nothing).
	if !strings.Contains(logs.String(), "run loop: NATS operation failed") || !strings.Contains(logs.String(), "run loop: NATS reachable again") {
		t.Fatalf("the dispatcher's run loop never saw the outage:\n%s", tail(logs.String(), 6000))
	}
	// Exactly once across files, not through ReadRun's dedupe.
	files, _ := filepath.Glob(filepath.Join(f.Store, "trajectories", "run=natsout", "*", "*.parquet"))
	total := 0
	for _, p := range files {
		total += countRows(t, p)
	}
	if rows := readRun(t, ctx, f.Store, "natsout"); len(rows) != episodes || total != episodes {
		t.Fatalf("%d episodes, %d rows across %d files; want %d stored once", len(rows), total, len(files), episodes)
	}
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// handlerStacks is the stacks of the goroutines in medgym's code (the
// services run in-process): where a stalled handler waits.
func handlerStacks() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	var keep []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "medgym/medgym/services/") || strings.Contains(g, "medgym/bus.(*Router)") {
			keep = append(keep, g)
		}
	}
	return strings.Join(keep, "\n\n")
}

// stallReport is what a stalled run's streams hold: each durable
// consumer's pending, unacked and redelivered messages and the pull
// requests waiting on the server.
func stallReport(conn *bus.Conn) string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	states, err := conn.ConsumerStates(ctx)
	if err != nil {
		states = append(states, "consumer states: "+err.Error())
	}
	return "consumers:\n  " + strings.Join(states, "\n  ")
}
