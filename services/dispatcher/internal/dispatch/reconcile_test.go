package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/medgym/medgym/schemas"
)

// memPipeline is a Pipeline whose episodes in play the test sets.
type memPipeline struct {
	mu     sync.Mutex
	inPlay map[string]bool
	err    error
	looks  int
}

func (p *memPipeline) EpisodesInPlay(_ context.Context, _ string) (map[string]bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.looks++
	if p.err != nil {
		return nil, p.err
	}
	out := make(map[string]bool, len(p.inPlay))
	for k, v := range p.inPlay {
		out[k] = v
	}
	return out, nil
}

func (p *memPipeline) set(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inPlay = map[string]bool{}
	for _, id := range ids {
		p.inPlay[id] = true
	}
}

// lostResults are the episodes of the infra_failure results recorded as
// lost so far, in order.
func lostResults(b *memBus) []string {
	var out []string
	for _, r := range b.results() {
		if r.Error == LostReason {
			out = append(out, r.Request.EpisodeID)
		}
	}
	return out
}

// TestReconcileLostEpisodes: an episode published, unscored, and with no
// message in play in two passes in a row is recorded once as an
// infra_failure result under its result message id; one in play, scored,
// or seen in play in between is not; an inconclusive pass or a failing
// publish changes nothing and the next pass catches up.
func TestReconcileLostEpisodes(t *testing.T) {
	f := newFixture(t)
	d := f.started(f.spec("r", 6, 1, 6))
	pipe := &memPipeline{}
	d.deps.Pipeline = pipe
	lost := 0
	d.deps.Lost = func() { lost++ }
	reqs := f.bus.requests()
	if len(reqs) != 6 {
		t.Fatalf("%d requests published, want 6", len(reqs))
	}
	ep := func(i int) string { return reqs[i].EpisodeID }
	f.score(d, "r", 0)
	f.score(d, "r", 1)
	pipe.set(ep(2), ep(3)) // 4 and 5 have no message in play
	reconcile := func() {
		t.Helper()
		if err := d.Reconcile(f.ctx); err != nil {
			t.Fatal(err)
		}
	}

	reconcile()
	if got := lostResults(f.bus); len(got) != 0 {
		t.Fatalf("first pass recorded %v; a loss must be seen twice", got)
	}
	// Episode 4 shows up in play (it was moving between streams).
	pipe.set(ep(2), ep(3), ep(4))
	reconcile()
	if got := lostResults(f.bus); !slices.Equal(got, []string{ep(5)}) {
		t.Fatalf("second pass recorded %v, want [%s]", got, ep(5))
	}
	// An inconclusive pass forgets nothing and records nothing.
	pipe.mu.Lock()
	pipe.err = fmt.Errorf("%w: dead letters pending", ErrInconclusive)
	pipe.mu.Unlock()
	pipe.set(ep(2))
	reconcile()
	if got := lostResults(f.bus); len(got) != 1 {
		t.Fatalf("inconclusive pass recorded %v", got)
	}
	pipe.mu.Lock()
	pipe.err = nil
	pipe.mu.Unlock()
	// Episode 3 scores; 4 leaves play: seen once, not recorded yet.
	f.score(d, "r", 3)
	reconcile()
	if got := lostResults(f.bus); len(got) != 1 {
		t.Fatalf("recorded %v after one pass without episode 4", got)
	}
	// The store is full: the record fails, and the next pass makes it.
	f.bus.mu.Lock()
	f.bus.fail = errors.New("nats: insufficient resources")
	f.bus.mu.Unlock()
	if err := d.Reconcile(f.ctx); err == nil {
		t.Fatal("Reconcile with a failing publish: no error")
	}
	f.bus.mu.Lock()
	f.bus.fail = nil
	f.bus.mu.Unlock()
	reconcile()
	got := lostResults(f.bus)
	if !slices.Equal(got, []string{ep(5), ep(4)}) {
		t.Fatalf("recorded %v, want [%s %s]", got, ep(5), ep(4))
	}
	if lost != 2 {
		t.Fatalf("Lost counted %d, want 2", lost)
	}
	for _, r := range f.bus.results() {
		if r.Termination != schemas.EndInfraFailure || r.Request.RunID != "r" || r.Request.Validate() != nil {
			t.Fatalf("lost-episode result %+v", r)
		}
	}
	for _, m := range f.bus.msgs {
		if _, ok := m.V.(schemas.EpisodeResult); ok && m.Subject != schemas.EpisodeCompleted.For("r") {
			t.Fatalf("result published on %s", m.Subject)
		}
	}
	if !f.bus.seen[schemas.ResultMsgID(ep(5))] || !f.bus.seen[schemas.ResultMsgID(ep(4))] {
		t.Fatal("lost episodes' results not published under their result message ids")
	}
	// Scored and in-play episodes were never recorded; once their scores
	// arrive the run finishes.
	for _, i := range []int{2, 4, 5} {
		f.score(d, "r", i)
	}
	if err := f.step(d, "r"); err != nil && !errors.Is(err, errRunOver) {
		t.Fatal(err)
	}
	if st := f.status("r"); !st.Finished || st.Done != 6 {
		t.Fatalf("run status %+v, want finished with 6 done", st)
	}
	before := pipe.looks
	reconcile()
	if pipe.looks != before {
		t.Fatal("a finished run was reconciled")
	}
}

// TestReconcileWithoutPipeline: no Pipeline, no reconciliation.
func TestReconcileWithoutPipeline(t *testing.T) {
	f := newFixture(t)
	d := f.started(f.spec("r", 2, 1, 2))
	for range 3 {
		if err := d.Reconcile(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.bus.results()) != 0 {
		t.Fatal("results published without a pipeline")
	}
}

// TestReconcileCancelledRuns: a drained run still waits for its published
// episodes, so its lost ones are recorded; a dropped run is over.
func TestReconcileCancelledRuns(t *testing.T) {
	for _, mode := range []string{schemas.CancelDrain, schemas.CancelDrop} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			d := f.started(f.spec("r", 2, 1, 2))
			d.deps.Pipeline = &memPipeline{}
			st, rev, err := f.runs.Get(f.ctx, "r")
			if err != nil {
				t.Fatal(err)
			}
			st.Cancel = mode
			if _, err := f.runs.Update(f.ctx, st, rev); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := d.Reconcile(f.ctx); err != nil {
					t.Fatal(err)
				}
			}
			want := 0
			if mode == schemas.CancelDrain {
				want = 2
			}
			if got := len(lostResults(f.bus)); got != want {
				t.Fatalf("%d lost episodes recorded, want %d", got, want)
			}
		})
	}
}
