package online

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/schemas"
)

// TestWaitScoresRidesOutNATSOutage: the server following a batch's scores
// goes away for longer than the follow's own timeouts (1 s fetches, 5 s
// requests) and comes back on the same store; waitScores collects the
// scores published before and after, and ends when the run is finished.
func TestWaitScoresRidesOutNATSOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps the server down for 8 s")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	opts := embedded.Options{StoreDir: t.TempDir(), Port: port}
	ns, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	conn := testConn(t, ctx, ns.ClientURL(), log)
	defer conn.Close()
	spec := schemas.RunSpec{RunID: "rl-it0000", Datasets: []string{"medcalcbench"}, TaskIDs: []string{"t"}, Samples: 4}
	score := func(k int) { publishScore(t, ctx, conn, spec.RunID, "t", k) }
	score(0)
	score(1)
	l := New(Config{WaitTimeout: Duration(time.Minute)}, conn, nil, io.Discard, log)
	type result struct {
		n   int
		err error
	}
	got := make(chan result, 1)
	go func() {
		s, err := l.waitScores(ctx, "rl-it0000")
		got <- result{len(s), err}
	}()
	time.Sleep(500 * time.Millisecond) // the follow has read the first two
	ns.Shutdown()
	ns.WaitForShutdown()
	select {
	case r := <-got:
		t.Fatalf("waitScores returned while the server was down: %d scores, %v", r.n, r.err)
	case <-time.After(8 * time.Second):
	}
	if ns, err = embedded.Start(opts); err != nil {
		t.Fatal(err)
	}
	score(2)
	score(3)
	putStatus(t, ctx, conn, schemas.RunStatus{Spec: spec, Total: 4, Published: 4, Done: 4, Finished: true})
	r := <-got
	if r.err != nil || r.n != 4 {
		t.Fatalf("waitScores: %d scores, %v; want 4", r.n, r.err)
	}
}
