package dispatch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// fixture is a Dispatcher on in-memory stores whose loops never start: the
// test steps each run by hand, so every round is deterministic.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	runs     memRuns
	episodes memEpisodes
	bus      *memBus
	purged   []string
	refused  map[string]int
	// total is the dispatchers' MaxInFlightTotal (0: the default).
	total int
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, ctx: context.Background(), runs: memRuns{newMemKV[schemas.RunStatus]()},
		episodes: memEpisodes{newMemKV[[]byte]()}, bus: &memBus{}, refused: map[string]int{}}
}

// dispatcher returns a new dispatcher on the fixture's shared stores (call
// it twice for two competing dispatchers).
func (f *fixture) dispatcher() *Dispatcher {
	d := New(f.ctx, Deps{
		Runs: f.runs, Episodes: f.episodes, Publish: f.bus.Publish,
		Purge: func(_ context.Context, run string) error { f.purged = append(f.purged, run); return nil },
		Load: func(_ context.Context, spec schemas.RunSpec, ds string) ([]tasks.Task, error) {
			if ds != "ds" {
				return nil, errors.New("no dataset " + ds)
			}
			ts := mkTasks(10)
			for i := range ts {
				ts[i].View.Instruction, ts[i].View.PermittedActions = "Solve it.", []string{"validate_code"}
				ts[i].Reference = "print(1)" // the reference policy needs one
			}
			return ts, nil
		},
		Refused: func(reason string) { f.refused[reason]++ },
	}, Config{MaxEpisodes: 1000, MaxInFlightTotal: f.total})
	d.manual = true
	return d
}

func (f *fixture) spec(run string, limit, samples, maxIn int) schemas.RunSpec {
	return schemas.RunSpec{RunID: run, Datasets: []string{"ds"}, Limit: limit, Samples: samples, MaxInFlight: maxIn,
		Policy: schemas.PolicySpec{Name: schemas.PolicyReference, Model: "reference-solution"}, Options: schemas.DefaultOptions()}
}

// started submits spec to a new dispatcher and runs the run's first round.
func (f *fixture) started(spec schemas.RunSpec) *Dispatcher {
	f.t.Helper()
	d := f.dispatcher()
	if err := d.Submit(f.ctx, spec); err != nil {
		f.t.Fatal(err)
	}
	if err := f.step(d, spec.RunID); err != nil {
		f.t.Fatal(err)
	}
	return d
}

// step runs one admission round of run on d.
func (f *fixture) step(d *Dispatcher, run string) error {
	f.t.Helper()
	d.mu.Lock()
	rs := d.active[run]
	d.mu.Unlock()
	if rs == nil {
		f.t.Fatalf("run %s is not driven by this dispatcher", run)
	}
	maxIn := rs.plan.Spec.MaxInFlight
	if maxIn <= 0 {
		maxIn = 64
	}
	return d.step(f.ctx, rs, newProgress(rs.plan.Len()), maxIn)
}

// stepOK runs one admission round of run on d, which must succeed.
func (f *fixture) stepOK(d *Dispatcher, run string) {
	f.t.Helper()
	if err := f.step(d, run); err != nil {
		f.t.Fatalf("step of run %s: %v", run, err)
	}
}

func (f *fixture) status(run string) schemas.RunStatus {
	f.t.Helper()
	st, _, err := f.runs.Get(f.ctx, run)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// score scores the i-th published request of run, as the verifier would.
func (f *fixture) score(d *Dispatcher, run string, i int) {
	f.t.Helper()
	req := f.bus.requests()[i]
	if err := d.Scored(f.ctx, schemas.Score{RunID: run, EpisodeID: req.EpisodeID}, schemas.EpisodeScored.For(run)); err != nil {
		f.t.Fatal(err)
	}
}

// TestAdmission: a run never has more than MaxInFlight published episodes
// unscored, publishes more as scores arrive, and finishes when every planned
// episode is published and scored.
func TestAdmission(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		limit, samples, maxIn int
	}{
		{"one at a time", 3, 1, 1},
		{"window of 4 over 12", 6, 2, 4},
		{"window larger than the run", 2, 2, 64},
		{"default window", 10, 8, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			d := f.dispatcher()
			if err := d.Submit(f.ctx, f.spec("r1", tc.limit, tc.samples, tc.maxIn)); err != nil {
				t.Fatal(err)
			}
			total := tc.limit * tc.samples
			window := tc.maxIn
			if window <= 0 {
				window = 64
			}
			if st := f.status("r1"); st.Total != total || st.Published != 0 {
				t.Fatalf("recorded status %+v, want total %d, nothing published", st, total)
			}
			scored := 0
			for round := 0; ; round++ {
				err := f.step(d, "r1")
				st := f.status("r1")
				if want := min(total, scored+window); st.Published != want {
					t.Fatalf("round %d: published %d with %d scored, want %d", round, st.Published, scored, want)
				}
				if got := len(f.bus.requests()); got != st.Published {
					t.Fatalf("round %d: %d requests on the bus, status says %d", round, got, st.Published)
				}
				if scored == total {
					if !errors.Is(err, errRunOver) || !st.Finished || st.Done != total {
						t.Fatalf("all scored: step %v, status %+v, want the run finished", err, st)
					}
					break
				}
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				f.score(d, "r1", scored) // one score per round
				scored++
			}
		})
	}
}

// TestResume: a dispatcher that starts finds the unfinished runs another
// left and continues them where they stopped; finished and rejected runs
// stay as they are, and a recorded run it cannot plan is marked failed.
func TestResume(t *testing.T) {
	f := newFixture(t)
	first := f.dispatcher()
	for _, spec := range []schemas.RunSpec{f.spec("open", 4, 1, 2), f.spec("done", 1, 1, 1)} {
		if err := first.Submit(f.ctx, spec); err != nil {
			t.Fatal(err)
		}
		if err := f.step(first, spec.RunID); err != nil {
			t.Fatal(err)
		}
	}
	f.score(first, "done", 2) // requests: open 0, open 1, done 0
	if err := f.step(first, "done"); !errors.Is(err, errRunOver) {
		t.Fatalf("run done: step %v, want it over", err)
	}
	// A run recorded with a dataset this dispatcher cannot load.
	bad := f.spec("bad", 1, 1, 1)
	bad.Datasets = []string{"gone"}
	if _, err := f.runs.Create(f.ctx, schemas.RunStatus{Spec: bad, Total: 1}); err != nil {
		t.Fatal(err)
	}

	second := f.dispatcher() // the first one crashed
	if err := second.Resume(f.ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := second.active["open"]; !ok || len(second.active) != 1 {
		t.Fatalf("resumed %v, want only run open", second.active)
	}
	if st := f.status("bad"); !st.Finished || !strings.Contains(st.Error, "gone") {
		t.Fatalf("unplannable run: %+v, want it failed with the cause", st)
	}
	f.stepOK(second, "open")
	if st := f.status("open"); st.Published != 2 {
		t.Fatalf("resumed run published %d with none scored and a window of 2, want still 2", st.Published)
	}
	f.score(second, "open", 0)
	f.stepOK(second, "open")
	reqs := f.bus.requests()
	if st := f.status("open"); st.Published != 3 || len(reqs) != 4 || reqs[3].EpisodeID == reqs[0].EpisodeID {
		t.Fatalf("after a score the resumed run published %d (bus %d), want the third episode", st.Published, len(reqs))
	}
}

// conflictingRuns lets another dispatcher step the same run between a
// dispatcher's read of the status and its write.
type conflictingRuns struct {
	memRuns
	before func()
}

func (c conflictingRuns) Update(ctx context.Context, st schemas.RunStatus, rev uint64) (uint64, error) {
	if c.before != nil {
		c.before()
	}
	return c.memRuns.Update(ctx, st, rev)
}

// TestTwoDispatchersConflict: two dispatchers drive one run (a resubmission
// reached both); the one whose status write loses the compare-and-set
// re-reads instead of overwriting, so the count of published episodes is
// never lost and no episode is published twice under two ids.
func TestTwoDispatchersConflict(t *testing.T) {
	f := newFixture(t)
	a := f.dispatcher()
	spec := f.spec("shared", 5, 1, 2)
	if err := a.Submit(f.ctx, spec); err != nil {
		t.Fatal(err)
	}
	b := f.dispatcher()
	if err := b.Submit(f.ctx, spec); err != nil { // the same run id: b continues the recorded run
		t.Fatal(err)
	}
	if _, ok := b.active["shared"]; !ok {
		t.Fatal("the second dispatcher does not drive the resubmitted run")
	}
	once := true
	a.deps.Runs = conflictingRuns{f.runs, func() {
		if once {
			once = false
			if err := f.step(b, "shared"); err != nil {
				t.Errorf("b's step: %v", err)
			}
		}
	}}
	if err := f.step(a, "shared"); !errors.Is(err, errConflict) {
		t.Fatalf("a's step after b moved the status on: %v, want errConflict", err)
	}
	if st := f.status("shared"); st.Published != 2 {
		t.Fatalf("published %d, want b's 2", st.Published)
	}
	if err := f.step(a, "shared"); err != nil { // the loop re-reads at once
		t.Fatal(err)
	}
	f.score(a, "shared", 0)
	f.score(b, "shared", 0) // the same score at both: counted once
	if f.refused["duplicate"] != 1 {
		t.Fatalf("refused %v, want one duplicate", f.refused)
	}
	f.stepOK(b, "shared")
	st := f.status("shared")
	reqs := f.bus.requests()
	if st.Published != 3 || st.Done != 1 || len(reqs) != 3 {
		t.Fatalf("status %+v with %d requests, want 3 published, 1 done", st, len(reqs))
	}
}

// TestRedeliveredSubmission: the same RunSubmitted delivered again (or
// resubmitted by a client) records one run and restarts nothing that is
// over.
func TestRedeliveredSubmission(t *testing.T) {
	f := newFixture(t)
	d := f.dispatcher()
	spec := f.spec("r", 1, 1, 1)
	for range 2 {
		if err := d.Submit(f.ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	if keys := f.runs.keys(); len(keys) != 1 || len(d.active) != 1 {
		t.Fatalf("runs %v, loops %d, want one of each", keys, len(d.active))
	}
	f.stepOK(d, "r")
	f.score(d, "r", 0)
	if err := f.step(d, "r"); !errors.Is(err, errRunOver) {
		t.Fatalf("step %v, want the run over", err)
	}
	delete(d.active, "r") // what the loop's exit does
	if err := d.Submit(f.ctx, spec); err != nil || len(d.active) != 0 {
		t.Fatalf("resubmitting a finished run: %v, %d loops, want nothing started", err, len(d.active))
	}
	// A run that cannot be planned is recorded as failed, once.
	big := f.spec("big", 10, 1000, 1)
	for range 2 {
		if err := d.Submit(f.ctx, big); err != nil {
			t.Fatal(err)
		}
	}
	if st := f.status("big"); !st.Finished || st.Error == "" {
		t.Fatalf("too large a run: %+v, want it failed", st)
	}
}

// TestScoredRefusals: only a score of a planned episode of a recorded,
// unfinished run, on its own subject, counts, once.
func TestScoredRefusals(t *testing.T) {
	f := newFixture(t)
	d := f.started(f.spec("r", 2, 1, 2))
	ep := f.bus.requests()[0].EpisodeID
	for _, tc := range []struct {
		name, subject, reason string
		sc                    schemas.Score
	}{
		{"another run's subject", schemas.EpisodeScored.For("other"), "subject_mismatch", schemas.Score{RunID: "r", EpisodeID: ep}},
		{"unknown run", "", "unknown_run", schemas.Score{RunID: "nope", EpisodeID: ep}},
		{"unplanned episode", "", "unplanned_episode", schemas.Score{RunID: "r", EpisodeID: "r--ds-99-k0"}},
		{"counted", schemas.EpisodeScored.For("r"), "", schemas.Score{RunID: "r", EpisodeID: ep}},
		{"duplicate", "", "duplicate", schemas.Score{RunID: "r", EpisodeID: ep}},
	} {
		before := f.refused[tc.reason]
		if err := d.Scored(f.ctx, tc.sc, tc.subject); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.reason != "" && f.refused[tc.reason] != before+1 {
			t.Fatalf("%s: refused %v, want one more %s", tc.name, f.refused, tc.reason)
		}
	}
	f.stepOK(d, "r")
	if st := f.status("r"); st.Done != 1 {
		t.Fatalf("done %d, want only the valid score counted", st.Done)
	}
}

// TestDeadLetterToEpisode: a dead letter of an episode's message becomes an
// infra_failure result for that episode (message id as the worker's, so a
// real result and the failure dedupe); others are refused with a reason.
func TestDeadLetterToEpisode(t *testing.T) {
	f := newFixture(t)
	d := f.started(f.spec("r", 2, 1, 2))
	req := f.bus.requests()[1]
	for _, tc := range []struct {
		name    string
		dl      DeadLetter
		wantErr error
	}{
		{"request", DeadLetter{Subject: schemas.EpisodeRequested.For("r"), Reason: "max deliveries", Request: &req}, nil},
		{"ref of a planned episode", DeadLetter{Subject: schemas.ObservationChecked.For("r"), Reason: "max deliveries",
			Ref: &schemas.EpisodeRef{RunID: "r", EpisodeID: f.bus.requests()[0].EpisodeID}}, nil},
		{"score", DeadLetter{Subject: schemas.EpisodeScored.For("r"), Reason: "bad"}, ErrDeadScore},
		{"no episode", DeadLetter{Subject: schemas.ActionRequested.For("r")}, ErrUnknownEpisode},
		{"unplanned ref", DeadLetter{Ref: &schemas.EpisodeRef{RunID: "r", EpisodeID: "r--zz-k0"}}, ErrUnknownEpisode},
		{"unknown run", DeadLetter{Request: &schemas.EpisodeRequest{RunID: "gone", EpisodeID: "gone--x-k0"}}, ErrUnknownRun},
	} {
		n := len(f.bus.results())
		err := d.DeadLetter(f.ctx, tc.dl)
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.wantErr)
		}
		res := f.bus.results()
		if tc.wantErr != nil {
			if len(res) != n {
				t.Fatalf("%s: published a result", tc.name)
			}
			continue
		}
		if len(res) != n+1 {
			t.Fatalf("%s: %d results, want one more", tc.name, len(res))
		}
		r := res[n]
		if r.Termination != schemas.EndInfraFailure || !strings.Contains(r.Error, "max deliveries") || r.Request.RunID != "r" {
			t.Fatalf("%s: result %+v, want an infra_failure for run r with the reason", tc.name, r)
		}
		if m := f.bus.msgs[len(f.bus.msgs)-1]; m.MsgID != schemas.MsgID(r.Request.EpisodeID, "result") {
			t.Fatalf("%s: message id %s, want the worker's result id", tc.name, m.MsgID)
		}
	}
}

// TestCancelDrop: a run cancelled with drop withdraws its queued requests
// and finishes at once; drain waits for the published episodes.
func TestCancel(t *testing.T) {
	for _, mode := range []string{schemas.CancelDrop, schemas.CancelDrain} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			d := f.started(f.spec("r", 4, 1, 2))
			st, rev, _ := f.runs.Get(f.ctx, "r")
			st.Cancel = mode
			if _, err := f.runs.Update(f.ctx, st, rev); err != nil {
				t.Fatal(err)
			}
			err := f.step(d, "r")
			st = f.status("r")
			if mode == schemas.CancelDrop {
				if !errors.Is(err, errRunOver) || !st.Cancelled || len(f.purged) != 1 {
					t.Fatalf("drop: step %v, status %+v, purged %v", err, st, f.purged)
				}
				return
			}
			if err != nil || st.Finished || st.Published != 2 {
				t.Fatalf("drain before the scores: step %v, status %+v", err, st)
			}
			f.score(d, "r", 0)
			f.score(d, "r", 1)
			if err := f.step(d, "r"); !errors.Is(err, errRunOver) {
				t.Fatalf("drain after the scores: step %v, want the run over", err)
			}
			if st := f.status("r"); !st.Cancelled || st.Published != 2 {
				t.Fatalf("drained: %+v", st)
			}
		})
	}
}

// TestStoreDownIsRetried: a store that fails makes the step fail (the loop
// retries it), and nothing is recorded as published that was not.
func TestStoreDownIsRetried(t *testing.T) {
	f := newFixture(t)
	d := f.dispatcher()
	if err := d.Submit(f.ctx, f.spec("r", 3, 1, 3)); err != nil {
		t.Fatal(err)
	}
	f.bus.fail = errors.New("nats: no responders")
	if err := f.step(d, "r"); err == nil || errors.Is(err, errRunOver) {
		t.Fatalf("step with the bus down: %v, want the publish error", err)
	}
	if st := f.status("r"); st.Published != 0 {
		t.Fatalf("published %d while the bus was down", st.Published)
	}
	f.bus.fail = nil
	f.stepOK(d, "r")
	if st := f.status("r"); st.Published != 3 {
		t.Fatalf("published %d after the bus came back, want 3", st.Published)
	}
}

// TestDeadResultFailsRun: a dead-lettered result (the verifier could not
// store a finished episode) fails the run with the reason, publishes no
// infra_failure, and a later failure does not overwrite the first.
func TestDeadResultFailsRun(t *testing.T) {
	f := newFixture(t)
	d := f.started(f.spec("r", 2, 1, 2))
	req := f.bus.requests()[0]
	res := DeadLetter{Subject: schemas.EpisodeCompleted.For("r"), Reason: "store refused the row", Request: &req}
	if err := d.DeadLetter(f.ctx, res); err != nil {
		t.Fatal(err)
	}
	st := f.status("r")
	if !st.Finished || !strings.Contains(st.Error, "store refused the row") || len(f.bus.results()) != 0 {
		t.Fatalf("status %+v, %d results; want the run failed with the reason and no result", st, len(f.bus.results()))
	}
	res.Reason = "later"
	if err := d.DeadLetter(f.ctx, res); err != nil {
		t.Fatal(err)
	}
	if st := f.status("r"); strings.Contains(st.Error, "later") {
		t.Fatalf("a later failure replaced the first: %q", st.Error)
	}
}
