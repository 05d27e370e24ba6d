package dispatcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// dataRoot is $MEDGYM_DATA or ../shared/data next to go.work.
func dataRoot(t *testing.T) string {
	t.Helper()
	return tasks.DataRoot()
}

// harness is a dispatcher on an embedded JetStream server, with no worker:
// the test plays the verifier (and the forger).
type harness struct {
	t       *testing.T
	ctx     context.Context
	conn    *bus.Conn
	metrics *bus.Metrics
	kv      *bus.Bucket[schemas.RunStatus]
}

func newHarness(t *testing.T, cfg Config, before func(h *harness)) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	conn, err := bus.Connect(ctx, bustest.StartJetStream(t), "dispatcher-test", log)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: ctx, conn: conn, metrics: bus.NewMetrics(), kv: kv}
	if before != nil {
		before(h)
	}
	cfg.Metrics, cfg.DataRoot, cfg.LibraryDir, cfg.Tick = h.metrics, dataRoot(t), t.TempDir(), 50*time.Millisecond
	svcCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- Run(svcCtx, conn, cfg, log) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
		conn.Close()
		cancel()
	})
	return h
}

func (h *harness) spec(run string, limit, samples, maxIn int) schemas.RunSpec {
	return schemas.RunSpec{RunID: run, Datasets: []string{"medcalcbench"}, Split: "test", Limit: limit, Samples: samples,
		MaxInFlight: maxIn, Policy: schemas.PolicySpec{Name: schemas.PolicyReference, Model: "reference-solution"},
		Options: schemas.DefaultOptions(), SubmittedAt: time.Now().UTC()}
}

func (h *harness) submit(spec schemas.RunSpec) {
	h.t.Helper()
	if err := bus.SubmitRun(h.ctx, h.conn, spec); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) status(run string) (schemas.RunStatus, uint64) {
	h.t.Helper()
	st, rev, err := h.kv.Get(h.ctx, run)
	if errors.Is(err, bus.ErrNotFound) {
		return schemas.RunStatus{}, 0
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return st, rev
}

// waitStatus polls the run's status until ok, failing after a minute.
func (h *harness) waitStatus(run, what string, ok func(schemas.RunStatus) bool) schemas.RunStatus {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, _ := h.status(run)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("run %s: waited a minute for %s; status %+v", run, what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settle waits until the dispatcher has handled every score published so
// far, then for two more rounds of the run's loop, so that the status
// reflects them.
func (h *harness) settle(run string) schemas.RunStatus {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if n, err := h.conn.ConsumerBacklog(h.ctx, schemas.StreamScores, schemas.DurableDispatcherScores); err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatal("the dispatcher did not handle the scores within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ := h.status(run)
	for range 2 {
		prev := st.UpdatedAt
		st = h.waitStatus(run, "a loop round", func(s schemas.RunStatus) bool { return !s.UpdatedAt.Equal(prev) || s.Finished })
	}
	return st
}

// requests returns the episode requests published for run so far.
func (h *harness) requests(run string) []schemas.EpisodeRequest {
	h.t.Helper()
	f, err := bus.Follow[schemas.EpisodeRequest](h.ctx, h.conn, schemas.StreamEpisodes, schemas.EpisodeRequested.For(run))
	if err != nil {
		h.t.Fatal(err)
	}
	var out []schemas.EpisodeRequest
	for m, err := range f.Available() {
		if err != nil {
			h.t.Fatal(err)
		}
		out = append(out, m.Value)
	}
	if f.Skipped() > 0 {
		h.t.Fatalf("%d requests of run %s do not decode", f.Skipped(), run)
	}
	return out
}

// score publishes a score on subject scored.<subjRun> with its own message
// id, as a forger (or a duplicating verifier) would.
func (h *harness) score(subjRun, run, episode, msgID string) {
	h.t.Helper()
	sc := schemas.Score{RunID: run, EpisodeID: episode, TaskID: "t", Dataset: "medcalcbench", Outcome: schemas.OutcomeCorrect,
		Reward: 1, VerifierVersion: "forged", ScoredAt: time.Now().UTC()}
	if err := h.conn.Publish(h.ctx, schemas.EpisodeScored.For(subjRun), msgID, sc); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) refused() map[string]float64 {
	h.t.Helper()
	mfs, err := h.metrics.Registry.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "medgym_dispatcher_scores_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[labelValue(m, "reason")] = m.GetCounter().GetValue()
		}
	}
	return out
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestForgedScoresDoNotFinishRun: scores for unplanned episodes, for
// another run, for an unknown run, on a subject of another run, and
// repeated scores of one episode neither finish the run nor open
// admission beyond --max-in-flight; the run finishes when every planned
// episode has a score.
func TestForgedScoresDoNotFinishRun(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	const run = "forged"
	h.submit(h.spec(run, 3, 2, 2))
	st := h.waitStatus(run, "2 published", func(s schemas.RunStatus) bool { return s.Published == 2 })
	if st.Total != 6 {
		t.Fatalf("total = %d, want 3 tasks × 2 samples", st.Total)
	}
	reqs := h.requests(run)
	if len(reqs) != 2 {
		t.Fatalf("%d requests published, want 2 (max in flight)", len(reqs))
	}
	first := reqs[0].EpisodeID
	taskTok := strings.TrimSuffix(strings.TrimPrefix(first, run+"--"), "-k0")
	forged := []struct{ subj, run, ep string }{
		{run, run, run + "--no-such-task-k0"},           // unplanned task
		{run, run, run + "--" + taskTok + "-k2"},        // sample beyond K
		{run, run, run + "--" + taskTok + "-k01"},       // non-canonical sample
		{run, run, "other--" + taskTok + "-k0"},         // another run's id
		{"ghost", "ghost", "ghost--" + taskTok + "-k0"}, // unknown run
		{run, "ghost", first},                           // subject of another run
	}
	for i, f := range forged {
		h.score(f.subj, f.run, f.ep, "forged-"+string(rune('a'+i)))
	}
	for i := range 4 { // one real-looking score, then three copies with other message ids
		h.score(run, run, first, "dup-"+string(rune('a'+i)))
	}
	st = h.settle(run)
	// Positive control: the old accounting counted the messages on the
	// run's score subject, which now exceed the run's size.
	subj := schemas.EpisodeScored.For(run)
	count, err := h.conn.SubjectCount(h.ctx, schemas.StreamScores, subj)
	if err != nil {
		t.Fatal(err)
	}
	if n := int(count); n < st.Total {
		t.Fatalf("control: %d messages on %s, want ≥ %d", n, subj, st.Total)
	}
	if st.Finished || st.Done != 1 || st.Published != 3 {
		t.Fatalf("after forged scores: finished %v, done %d, published %d; want not finished, 1 done, 3 published (2 in flight)",
			st.Finished, st.Done, st.Published)
	}
	got := h.refused()
	want := map[string]float64{"unplanned_episode": 4, "unknown_run": 1, "subject_mismatch": 1, "duplicate": 3}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("refused[%s] = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}

	// The verifier's scores, one per planned episode, finish the run.
	scored := map[string]bool{first: true}
	for !st.Finished {
		for _, r := range h.requests(run) {
			if !scored[r.EpisodeID] {
				scored[r.EpisodeID] = true
				h.score(run, run, r.EpisodeID, schemas.MsgID(r.EpisodeID, "scored"))
			}
		}
		st = h.settle(run)
		if len(scored) > st.Total {
			t.Fatalf("%d episodes requested, want %d", len(scored), st.Total)
		}
	}
	if st.Done != 6 || st.Published != 6 || st.Cancelled {
		t.Fatalf("final status %+v", st)
	}
}

// TestCancelRun: a drained run publishes nothing more and finishes when the
// episodes in flight are scored; a dropped run finishes at once and its
// requests no worker took are withdrawn.
func TestCancelRun(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	cancelRun := func(run, mode string) {
		t.Helper()
		for {
			st, rev := h.status(run)
			st.Cancel = mode
			if _, err := h.kv.Update(h.ctx, run, st, rev); err == nil {
				return
			} else if !errors.Is(err, bus.ErrConflict) {
				t.Fatal(err)
			}
		}
	}
	for _, run := range []string{"drain", "drop"} {
		h.submit(h.spec(run, 3, 2, 2))
		h.waitStatus(run, "2 published", func(s schemas.RunStatus) bool { return s.Published == 2 })
	}

	cancelRun("drain", schemas.CancelDrain)
	reqs := h.requests("drain")
	h.score("drain", "drain", reqs[0].EpisodeID, "s0")
	st := h.settle("drain")
	if st.Published != 2 || st.Finished {
		t.Fatalf("draining run after one score: published %d, finished %v; want 2, false", st.Published, st.Finished)
	}
	h.score("drain", "drain", reqs[1].EpisodeID, "s1")
	st = h.waitStatus("drain", "finished", func(s schemas.RunStatus) bool { return s.Finished })
	if !st.Cancelled || st.Published != 2 || st.Done != 2 || st.Total != 6 {
		t.Fatalf("drained run: %+v", st)
	}

	cancelRun("drop", schemas.CancelDrop)
	st = h.waitStatus("drop", "finished", func(s schemas.RunStatus) bool { return s.Finished })
	if !st.Cancelled || st.Done != 0 {
		t.Fatalf("dropped run: %+v", st)
	}
	if n := len(h.requests("drop")); n != 0 {
		t.Fatalf("%d requests of the dropped run are still in the stream", n)
	}
	if n := len(h.requests("drain")); n != 2 {
		t.Fatalf("dropping one run withdrew the requests of another: %d left, want 2", n)
	}
}

// TestRefusesTooLargeRuns: 2e9 samples, or 1e6 samples of 20 tasks, are
// refused with an error naming the limit, at submit and when resuming a
// spec recorded before; a run at the limit is accepted.
func TestRefusesTooLargeRuns(t *testing.T) {
	recorded := schemas.RunStatus{Spec: schemas.RunSpec{}}
	h := newHarness(t, Config{MaxEpisodes: 100}, func(h *harness) {
		// A spec a dispatcher without a bound accepted: resuming it must
		// not plan it.
		recorded.Spec = h.spec("recorded", 0, 2_000_000_000, 0)
		if _, err := h.kv.Create(h.ctx, "recorded", recorded); err != nil {
			t.Fatal(err)
		}
	})
	h.submit(h.spec("huge", 1, 2_000_000_000, 0))
	h.submit(h.spec("wide", 20, 1_000_000, 0))
	h.submit(h.spec("edge", 20, 5, 0))
	for _, run := range []string{"huge", "wide", "recorded"} {
		st := h.waitStatus(run, "refused", func(s schemas.RunStatus) bool { return s.Error != "" })
		if !st.Finished || !strings.Contains(st.Error, "limit of 100 episodes") || !strings.Contains(st.Error, "--max-episodes") {
			t.Fatalf("run %s: %+v", run, st)
		}
	}
	st := h.waitStatus("edge", "accepted", func(s schemas.RunStatus) bool { return s.Total > 0 || s.Error != "" })
	if st.Error != "" || st.Total != 100 {
		t.Fatalf("a run of exactly the limit: %+v", st)
	}
}

// TestRefusesReferenceRunWithoutReferences: the dispatcher itself (not only
// the CLI's preflight) refuses a reference-policy run over task files that
// carry no reference solutions (upstream MedAgentGym's), recording why;
// the same tasks under the openai policy are planned (positive control).
func TestRefusesReferenceRunWithoutReferences(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "tasks", "testdata", "upstream", "medcalcbench", "test_tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "medcalcbench"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "medcalcbench", "test_tasks.jsonl"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Config{}, nil)
	ref := h.spec("upstream-ref", 3, 1, 0)
	ref.TasksDir = dir
	open := h.spec("upstream-openai", 3, 1, 0)
	open.TasksDir = dir
	open.Policy = schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "m", BaseURL: "http://127.0.0.1:1/v1"}
	h.submit(ref)
	h.submit(open)
	st := h.waitStatus("upstream-ref", "refused", func(s schemas.RunStatus) bool { return s.Error != "" })
	if !st.Finished || st.Total != 0 || !strings.Contains(st.Error, "without a reference solution") || !strings.Contains(st.Error, "3 of 3") {
		t.Fatalf("reference run over upstream tasks: %+v", st)
	}
	st = h.waitStatus("upstream-openai", "accepted", func(s schemas.RunStatus) bool { return s.Total > 0 || s.Error != "" })
	if st.Error != "" || st.Total != 3 {
		t.Fatalf("openai run over the same tasks: %+v", st)
	}
}
