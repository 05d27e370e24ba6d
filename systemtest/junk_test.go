package systemtest

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// consumedSubjects are the subject families some handler consumes, with
// the handler that does.
var consumedSubjects = map[schemas.Subject]string{
	schemas.RunSubmitted:        "dispatcher-runs",
	schemas.EpisodeRequested:    "llm-episodes",
	schemas.ActionRequested:     "sandbox-actions",
	schemas.ObservationProduced: "verifier-observations",
	schemas.ObservationChecked:  "llm-checks",
	schemas.EpisodeCompleted:    "verifier-results",
	schemas.DeadLetter:          "dispatcher-deadletters",
}

// embeddedBus starts an embedded JetStream server for the test, points f at
// it, and returns a connection with medgym's streams made; both end with the
// test.
func embeddedBus(t *testing.T, ctx context.Context, f *cli.RunFlags) *bus.Conn {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	f.NATS = ns.ClientURL()
	conn, err := bus.Connect(ctx, f.NATS, "test", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return conn
}

// startMeteredPipeline runs every service in-process on an embedded
// JetStream server with one bus.Metrics, as `medgym serve` does.
func startMeteredPipeline(t *testing.T, ctx context.Context, f *cli.RunFlags) (*bus.Conn, *bus.Metrics) {
	t.Helper()
	conn := embeddedBus(t, ctx, f)
	log := cli.NewLogger(io.Discard, "error")
	m := bus.NewMetrics()
	goServices(t, ctx, f, func(string) *bus.Conn { return conn }, m, log, tasks.AgentTree(f.Library))
	return conn, m
}

// allDrained waits until every durable consumer of every medgym stream has
// nothing pending and nothing unacked: nothing more can be produced.
func allDrained(t *testing.T, ctx context.Context, conn *bus.Conn) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		busy, err := conn.BusyConsumer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if busy == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s still busy after 60 s: something keeps producing messages", busy)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func subjectCount(t *testing.T, ctx context.Context, conn *bus.Conn, stream, subject string) uint64 {
	t.Helper()
	n, err := conn.SubjectCount(ctx, stream, subject)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestJunkFloodDoesNotLoop is issue 13 items 2 and 6 (worker side): an
// empty body, null, [], and garbage published to every consumed subject of
// a running pipeline, and well-formed messages for an unknown run and for
// an episode the run never planned, are acked and counted as junk: the
// dead-letter stream gets none of them (before the fix, the dead-letter
// handler re-poisoned undecodable dead letters forever), nothing is
// executed or stored for them, and a real run submitted among them still
// completes correctly.
func TestJunkFloodDoesNotLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.Limit, f.RunID = 3, "junk-real"
	if st, err := os.Stat(f.Library); err != nil || !st.IsDir() {
		f.Library = sandboxReachableDir(t) // medcalcbench needs no generated library
	}
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	conn, m := startMeteredPipeline(t, ctx, f)
	publishJunk(t, ctx, conn, "x", slices.Collect(maps.Keys(consumedSubjects)))
	junk := junkBodies

	// Well-formed messages of a run no dispatcher accepted.
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: f.Data})
	if err != nil {
		t.Fatal(err)
	}
	task := ts[0]
	ghost := schemas.EpisodeRequest{RunID: "ghost", EpisodeID: schemas.EpisodeID("ghost", task.View.ID, 0),
		Task: task.View, Policy: spec.Policy, Options: spec.Options, RequestedAt: time.Now().UTC()}
	ghostResult := func(req schemas.EpisodeRequest) schemas.EpisodeResult {
		return schemas.EpisodeResult{Request: req, Termination: schemas.EndAnswered, FinalAnswer: "forged",
			StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC()}
	}
	ref := schemas.EpisodeRef{RunID: "ghost", EpisodeID: ghost.EpisodeID, TaskID: task.View.ID, Dataset: task.View.Dataset}
	forged := []struct {
		subj string
		msg  schemas.Validator
	}{
		{schemas.EpisodeRequested.For("ghost"), ghost},
		{schemas.EpisodeCompleted.For("ghost"), ghostResult(ghost)},
		{schemas.ActionRequested.For("ghost"), schemas.ActionRequest{Ref: ref, TimeoutSec: 5,
			Action: schemas.Action{Name: schemas.ActionValidateCode, Params: json.RawMessage(`{"code":"print(1)"}`)}}},
		{schemas.ObservationProduced.For("ghost"), schemas.Observation{Ref: ref, Action: schemas.ActionValidateCode,
			Result: schemas.ExecResult{Status: schemas.StatusOK}}},
		{schemas.ObservationChecked.For("ghost"), schemas.Observation{Ref: ref, Action: schemas.ActionValidateCode,
			Result: schemas.ExecResult{Status: schemas.StatusOK}}},
	}
	for _, fm := range forged {
		if err := conn.Publish(ctx, fm.subj, "", fm.msg); err != nil {
			t.Fatal(err)
		}
	}

	// The real run, and a result for an episode it never planned (sample 7
	// of a 1-sample run) once the run is recorded.
	if err := bus.SubmitRun(ctx, conn, spec); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, err := kv.Get(ctx, spec.RunID); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the run was never recorded")
		case <-time.After(50 * time.Millisecond):
		}
	}
	unplanned := ghost
	unplanned.RunID, unplanned.SampleIndex = spec.RunID, 7
	unplanned.EpisodeID = schemas.EpisodeID(spec.RunID, task.View.ID, 7)
	if err := conn.Publish(ctx, schemas.EpisodeCompleted.For(spec.RunID), "", ghostResult(unplanned)); err != nil {
		t.Fatal(err)
	}

	status, outcomes, err := cli.Follow(ctx, conn, spec.RunID, io.Discard, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if status.Total != 3 || outcomes[schemas.OutcomeCorrect] != 3 {
		t.Fatalf("real run: outcomes %v of %d episodes, want 3 correct", outcomes, status.Total)
	}
	allDrained(t, ctx, conn)

	// The dead-letter stream holds the junk published to it directly and
	// nothing else: no handler dead-lettered anything.
	if n := streamMsgsOf(t, ctx, conn, schemas.StreamDeadLetter); n != uint64(len(junk)) {
		t.Fatalf("dead-letter stream holds %d messages after junk, want the %d published to it", n, len(junk))
	}
	for subj, handler := range consumedSubjects {
		if got := m.Junk(handler, bus.JunkUndecodable); got != float64(len(junk)) {
			t.Errorf("%s: junk counted %v by %s, want %d", subj, got, handler, len(junk))
		}
	}
	for handler, want := range map[string]float64{"llm-episodes": 1, "verifier-results": 1, "sandbox-actions": 1,
		"verifier-observations": 1, "llm-checks": 1} {
		if got := m.Junk(handler, bus.JunkUnknownRun); got != want {
			t.Errorf("%s: unknown-run messages counted %v, want %v", handler, got, want)
		}
	}
	if got := m.Junk("verifier-results", bus.JunkUnknownEpisode); got != 1 {
		t.Errorf("verifier-results: unplanned episodes counted %v, want 1", got)
	}
	// Nothing was executed, checked, scored or stored for them.
	for stream, subj := range map[string]string{
		schemas.StreamObservations: schemas.ObservationProduced.For("ghost"),
		schemas.StreamActions:      schemas.ActionRequested.For("ghost"),
		schemas.StreamScores:       schemas.EpisodeScored.For("ghost"),
	} {
		want := uint64(0)
		if stream == schemas.StreamActions || stream == schemas.StreamObservations {
			want = 1 // the forged message itself
		}
		if n := subjectCount(t, ctx, conn, stream, subj); n != want {
			t.Errorf("%s holds %d messages on %s, want %d", stream, n, subj, want)
		}
	}
	if rows := readRun(t, ctx, f.Store, "ghost"); len(rows) != 0 {
		t.Errorf("%d rows stored for the unknown run", len(rows))
	}
	rows := readRun(t, ctx, f.Store, spec.RunID)
	if len(rows) != 3 {
		t.Fatalf("%d rows stored for the real run, want 3 (no unplanned episode)", len(rows))
	}
	for _, r := range rows {
		if r.EpisodeID == unplanned.EpisodeID {
			t.Fatalf("the unplanned episode %s was stored", r.EpisodeID)
		}
	}
}

// junkBodies are message bodies no handler can decode: empty, JSON that is
// not an object, and bytes that are not JSON.
var junkBodies = []string{"", "null", "[]", "\x00garbage{"}

// publishJunk publishes every junk body on each subject family's subject
// for run.
func publishJunk(t *testing.T, ctx context.Context, conn *bus.Conn, run string, subjects []schemas.Subject) {
	t.Helper()
	for _, subj := range subjects {
		for _, body := range junkBodies {
			if err := conn.PublishRaw(ctx, subj.For(run), []byte(body)); err != nil {
				t.Errorf("publish junk to %s: %v", subj.For(run), err)
				return
			}
		}
	}
}

// sandboxReachableDir is an empty directory the sandbox (uid 65534) can
// reach, which t.TempDir (0700 parent) is not.
func sandboxReachableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "medgym-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func streamMsgsOf(t *testing.T, ctx context.Context, conn *bus.Conn, stream string) uint64 {
	t.Helper()
	n, err := conn.StreamCount(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
