package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/schemas"
)

func putStatus(t *testing.T, ctx context.Context, conn *bus.Conn, runID string, st schemas.RunStatus) {
	t.Helper()
	kv, err := bus.JetStream(conn).KeyValue(ctx, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st)
	if _, err := kv.Put(ctx, runID, b); err != nil {
		t.Fatal(err)
	}
}

func publishScore(t *testing.T, ctx context.Context, conn *bus.Conn, msgID string, sc schemas.Score) {
	t.Helper()
	if err := conn.Publish(ctx, schemas.EpisodeScored.For(sc.RunID), msgID, sc); err != nil {
		t.Fatal(err)
	}
}

// TestSubmitRunOnce: a resubmitted run is one message (the run's message
// id), which is what lets `medgym run --run-id` continue a run.
func TestSubmitRunOnce(t *testing.T) {
	conn, ctx := setup(t)
	spec := schemas.RunSpec{RunID: "r1", Datasets: []string{"medcalcbench"}, Split: "test", Samples: 1,
		Policy: schemas.PolicySpec{Name: schemas.PolicyReference}, Options: schemas.DefaultOptions(), MaxInFlight: 1,
		SubmittedAt: time.Now().UTC()}
	for range 2 {
		if err := bus.SubmitRun(ctx, conn, spec); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamMsgs(t, ctx, conn, schemas.StreamRuns); n != 1 {
		t.Fatalf("%d messages after two submissions, want 1", n)
	}
}

// TestFollowRun: each episode's score is yielded once (a redelivered copy
// and another run's score on the subject are not), Scored is the
// dispatcher's count, and the follow ends with the step that sees the run
// finished.
func TestFollowRun(t *testing.T) {
	conn, ctx := setup(t)
	putStatus(t, ctx, conn, "r1", schemas.RunStatus{Total: 2, Published: 2, Done: 1})
	publishScore(t, ctx, conn, "a", score("r1--a-k0"))
	publishScore(t, ctx, conn, "a-again", score("r1--a-k0"))
	publishScore(t, ctx, conn, "x", score("other--x-k0"))
	var got []string
	steps := 0
	for p, err := range bus.FollowRun(ctx, conn, "r1", 10*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		steps++
		for _, sc := range p.Scores {
			got = append(got, sc.EpisodeID)
		}
		if steps == 1 {
			if p.Scored != 1 || p.Status.Total != 2 || p.Status.Finished {
				t.Fatalf("first step %+v", p)
			}
			publishScore(t, ctx, conn, "b", score("r1--b-k0"))
			putStatus(t, ctx, conn, "r1", schemas.RunStatus{Total: 2, Published: 2, Done: 2, Finished: true})
		}
		if p.Status.Finished && p.Scored != 2 {
			t.Fatalf("finished with %d scores", p.Scored)
		}
	}
	if strings.Join(got, ",") != "r1--a-k0,r1--b-k0" {
		t.Fatalf("scores %v, want r1--a-k0 then r1--b-k0", got)
	}
}

// TestFollowRunEnds: a run the dispatcher rejected ends the follow with
// its reason; a done context with the context's error.
func TestFollowRunEnds(t *testing.T) {
	conn, ctx := setup(t)
	putStatus(t, ctx, conn, "bad", schemas.RunStatus{Error: "no such dataset", Finished: true})
	var err error
	for _, err = range bus.FollowRun(ctx, conn, "bad", 10*time.Millisecond) {
	}
	if err == nil || !strings.Contains(err.Error(), "rejected by the dispatcher: no such dataset") {
		t.Fatalf("rejected run: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := 0
	for _, err = range bus.FollowRun(cctx, conn, "never", 10*time.Millisecond) {
		if n++; n == 3 {
			cancel()
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled follow: %v", err)
	}
}

// TestRecentIDsBounded (robust item 4): `medgym run` kept every episode id
// it saw, so its memory grew with --samples. The set FollowRun dedupes
// with holds at most its capacity whatever it is shown, still refuses an
// id it holds, and forgets the oldest (an unbounded map would not: the
// positive control that the ids really were distinct).
func TestRecentIDsBounded(t *testing.T) {
	r := bus.NewRecentIDs(8)
	for i := range 1000 {
		if !r.Add(fmt.Sprintf("run--t%d-k0", i)) {
			t.Fatalf("id %d refused on first sight", i)
		}
		if r.Add(fmt.Sprintf("run--t%d-k0", i)) {
			t.Fatalf("id %d accepted twice in a row", i)
		}
		if r.Len() > 8 {
			t.Fatalf("%d ids held after %d, want at most 8", r.Len(), i+1)
		}
	}
	if !r.Add("run--t0-k0") {
		t.Error("the oldest id is still held")
	}
}

// TestFollowRunEndsDuringOutage: a follow cancelled while NATS is down
// (SIGTERM to medgym run during an outage) ends with the context's error,
// although the ordered consumer's fetch waits for NATS to come back.
func TestFollowRunEndsDuringOutage(t *testing.T) {
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			ns.Shutdown()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := bus.Connect(ctx, ns.ClientURL(), "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.NATS(conn).Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	putStatus(t, ctx, conn, "r1", schemas.RunStatus{Total: 2, Published: 2})
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	ended := make(chan error, 1)
	steps := make(chan struct{}, 100)
	go func() {
		var err error
		for _, err = range bus.FollowRun(fctx, conn, "r1", 50*time.Millisecond) {
			select {
			case steps <- struct{}{}:
			default:
			}
		}
		ended <- err
	}()
	<-steps
	ns.Shutdown()
	ns.WaitForShutdown()
	stopped = true
	waitFor(t, 30*time.Second, func() bool { return !bus.NATS(conn).IsConnected() })
	time.Sleep(500 * time.Millisecond) // a few steps into the outage
	fcancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("follow ended with %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled follow did not end while NATS was down")
	}
}

// TestRequestWithoutDeadline: Request works under a context with no
// deadline (medgym nats provision runs under a signal context; nats.go's
// flush refused it with "context requires a deadline").
func TestRequestWithoutDeadline(t *testing.T) {
	conn, _ := setup(t)
	reply, err := conn.Request(context.Background(), "$JS.API.INFO", nil)
	if err != nil || !strings.Contains(string(reply), "memory") {
		t.Fatalf("request without a deadline: %v, %s", err, reply)
	}
	if err := bus.Provision(context.Background(), conn, bus.StreamOptions{Memory: true}); err != nil {
		t.Fatalf("provision without a deadline: %v", err)
	}
}
