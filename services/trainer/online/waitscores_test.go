package online

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/schemas"
)

// publishScore publishes a correct score for sample k of task in run.
func publishScore(t *testing.T, ctx context.Context, conn *bus.Conn, run, task string, k int) {
	t.Helper()
	sc := schemas.Score{RunID: run, EpisodeID: schemas.EpisodeID(run, task, k), TaskID: task, Dataset: "medcalcbench",
		SampleIndex: k, Outcome: schemas.OutcomeCorrect, Reward: 1, ScoredAt: time.Now().UTC()}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For(run), "", sc); err != nil {
		t.Fatal(err)
	}
}

// putStatus writes a run status as the dispatcher does.
func putStatus(t *testing.T, ctx context.Context, conn *bus.Conn, rs schemas.RunStatus) {
	t.Helper()
	kv, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, rs.Spec.RunID, rs); err != nil {
		t.Fatal(err)
	}
}

// TestWaitScoresEndsOnFinishedNotOnForgedScores: forged scores on a run's
// subject, with more distinct unplanned ids (samples beyond K, a task the
// run did not select, another run's id) than the run plans, do not end the
// wait; the dispatcher's status `finished` does, and only the planned
// episodes' scores are returned. Before, the wait counted distinct ids and
// returned the forged scores as the batch.
func TestWaitScoresEndsOnFinishedNotOnForgedScores(t *testing.T) {
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	conn := testConn(t, ctx, ns.ClientURL(), log)
	defer conn.Close()
	const run = "rl-it0000"
	spec := schemas.RunSpec{RunID: run, Datasets: []string{"medcalcbench"}, TaskIDs: []string{"t"}, Samples: 2}
	putStatus(t, ctx, conn, schemas.RunStatus{Spec: spec, Total: 2, Published: 2})
	for k := 2; k < 6; k++ {
		publishScore(t, ctx, conn, run, "t", k) // beyond K
	}
	publishScore(t, ctx, conn, run, "other-task", 0)
	sc := schemas.Score{RunID: "rl-it0001", EpisodeID: schemas.EpisodeID("rl-it0001", "t", 0), TaskID: "t",
		Dataset: "medcalcbench", Outcome: schemas.OutcomeCorrect, Reward: 1, ScoredAt: time.Now().UTC()}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For(run), "", sc); err != nil {
		t.Fatal(err)
	}
	publishScore(t, ctx, conn, run, "t", 0)

	l := New(Config{WaitTimeout: Duration(time.Minute)}, conn, nil, io.Discard, log)
	type result struct {
		scores map[string]schemas.Score
		err    error
	}
	got := make(chan result, 1)
	go func() {
		s, err := l.waitScores(ctx, run)
		got <- result{s, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("waitScores returned before the run finished: %d scores, %v", len(r.scores), r.err)
	case <-time.After(3 * time.Second): // three idle fetches: every score above was read
	}
	publishScore(t, ctx, conn, run, "t", 1)
	putStatus(t, ctx, conn, schemas.RunStatus{Spec: spec, Total: 2, Published: 2, Done: 2, Finished: true})
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.scores) != 2 {
		t.Fatalf("waitScores returned %d scores, want the 2 planned ones: %v", len(r.scores), r.scores)
	}
	for k := range 2 {
		if _, ok := r.scores[schemas.EpisodeID(run, "t", k)]; !ok {
			t.Errorf("planned episode %d missing from %v", k, r.scores)
		}
	}
}

// testConn connects to the server at url, with the streams in place; the
// caller closes it.
func testConn(t *testing.T, ctx context.Context, url string, log *slog.Logger) *bus.Conn {
	t.Helper()
	conn, err := bus.Connect(ctx, url, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn
}
