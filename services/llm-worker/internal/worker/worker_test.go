package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
)

// memStates is a StateStore in memory with the declared revision rules.
type memStates struct {
	mu   sync.Mutex
	last uint64
	m    map[string]stateRec
	// beforeUpdate, when set, runs before an update takes the lock (another
	// worker acting in between).
	beforeUpdate func()
	gets         int // Get calls
}

type stateRec struct {
	b   []byte // JSON, so a saved state cannot alias the caller's
	rev uint64
}

func (s *memStates) Get(_ context.Context, id string) (schemas.EpisodeState, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	r, ok := s.m[id]
	if !ok {
		return schemas.EpisodeState{}, 0, fmt.Errorf("episode %s: %w", id, ErrNotFound)
	}
	var st schemas.EpisodeState
	err := json.Unmarshal(r.b, &st)
	return st, r.rev, err
}

func (s *memStates) put(st schemas.EpisodeState, rev uint64, create bool) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]stateRec{}
	}
	id := st.Request.EpisodeID
	r, ok := s.m[id]
	if (create && ok) || (!create && (!ok || r.rev != rev)) {
		return 0, fmt.Errorf("episode %s: %w", id, ErrConflict)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return 0, err
	}
	s.last++
	s.m[id] = stateRec{b, s.last}
	return s.last, nil
}

func (s *memStates) Create(_ context.Context, st schemas.EpisodeState) (uint64, error) {
	return s.put(st, 0, true)
}

func (s *memStates) Update(_ context.Context, st schemas.EpisodeState, rev uint64) (uint64, error) {
	if f := s.beforeUpdate; f != nil {
		s.beforeUpdate = nil
		f()
	}
	return s.put(st, rev, false)
}

// sentMsg is one publish, before any dedupe: the test checks ids.
type sentMsg struct {
	subject, id string
	v           schemas.Validator
}

type recorder struct {
	msgs []sentMsg
	fail error
}

func (r *recorder) Publish(_ context.Context, subject, id string, v schemas.Validator) error {
	if r.fail != nil {
		return r.fail
	}
	if err := v.Validate(); err != nil {
		return err
	}
	r.msgs = append(r.msgs, sentMsg{subject, id, v})
	return nil
}

// counting is a policy that replies with a code action and counts its calls.
type counting struct{ calls int }

func (c *counting) Complete(context.Context, schemas.EpisodeRequest, []schemas.ChatMessage) (episode.Completion, error) {
	c.calls++
	b, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": fmt.Sprintf("print(%d)", c.calls)}})
	return episode.Completion{Text: string(b), FinishReason: "stop"}, nil
}

func newWorker(p *counting) (*Worker, *memStates, *recorder) {
	st, rec := &memStates{}, &recorder{}
	return &Worker{States: st, Publish: rec.Publish, Engine: &episode.Engine{
		Policy: func(schemas.PolicySpec) (episode.Policy, error) { return p, nil },
		Now:    func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
		Worker: "test",
	}}, st, rec
}

func request() schemas.EpisodeRequest {
	opts := schemas.DefaultOptions()
	opts.MaxTurns = 3
	return schemas.EpisodeRequest{RunID: "r", EpisodeID: "r--t-k0",
		Task:   schemas.TaskView{ID: "t", Dataset: "medcalcbench", Split: "test", Question: "BMI?", PermittedActions: []string{"validate_code"}},
		Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "m"}, Options: opts}
}

func observation(a schemas.ActionRequest) schemas.Observation {
	return schemas.Observation{Ref: a.Ref, Action: a.Action.Name, Result: schemas.ExecResult{Status: schemas.StatusOK, Stdout: "1\n"}}
}

// TestRedelivery: each redelivery re-publishes the pending message under the
// same message id, without sampling the policy again or saving anything.
func TestRedelivery(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// redeliver delivers a message a second time, after the first step
		// (started: the request's first delivery was handled).
		redeliver func(w *Worker, first schemas.ActionRequest) error
		wantID    func(first schemas.ActionRequest) string
	}{
		{"request", func(w *Worker, _ schemas.ActionRequest) error { return w.Start(ctx, request()) },
			func(a schemas.ActionRequest) string { return schemas.MsgID(a.Ref.EpisodeID, 0, "action") }},
		{"observation", func(w *Worker, a schemas.ActionRequest) error {
			if err := w.Observe(ctx, observation(a)); err != nil {
				return err
			}
			return w.Observe(ctx, observation(a)) // the same observation again: stale
		}, func(a schemas.ActionRequest) string { return schemas.MsgID(a.Ref.EpisodeID, 1, "action") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &counting{}
			w, states, rec := newWorker(p)
			if err := w.Start(ctx, request()); err != nil {
				t.Fatal(err)
			}
			first := rec.msgs[0].v.(schemas.ActionRequest)
			if err := tc.redeliver(w, first); err != nil {
				t.Fatal(err)
			}
			calls, last := p.calls, states.last
			n := len(rec.msgs)
			if n < 2 || rec.msgs[n-1].id != rec.msgs[n-2].id || rec.msgs[n-1].id != tc.wantID(first) {
				t.Fatalf("messages %v: want the last two with id %s", rec.msgs, tc.wantID(first))
			}
			if tc.name == "request" && (calls != 1 || last != 1) {
				t.Fatalf("a redelivered request sampled the policy %d times and saved %d times, want once each", calls, last)
			}
			if tc.name == "observation" && (calls != 2 || last != 2) {
				t.Fatalf("a stale observation: policy %d, saves %d, want 2 each (one real step)", calls, last)
			}
		})
	}
}

// TestUnknownEpisode: an observation for an episode no worker started.
func TestUnknownEpisode(t *testing.T) {
	w, _, rec := newWorker(&counting{})
	obs := schemas.Observation{Ref: schemas.EpisodeRef{RunID: "r", EpisodeID: "r--t-k0"}, Action: "validate_code"}
	if err := w.Observe(context.Background(), obs); !errors.Is(err, ErrUnknownEpisode) || len(rec.msgs) != 0 {
		t.Fatalf("observe: %v, %d messages, want ErrUnknownEpisode and nothing published", err, len(rec.msgs))
	}
}

// TestTwoWorkersRace: two workers step the same episode from the same
// state; the second save loses the compare-and-set and publishes nothing,
// so the episode has one next turn.
func TestTwoWorkersRace(t *testing.T) {
	ctx := context.Background()
	w, states, rec := newWorker(&counting{})
	if err := w.Start(ctx, request()); err != nil {
		t.Fatal(err)
	}
	obs := observation(rec.msgs[0].v.(schemas.ActionRequest))
	other := &Worker{States: states, Publish: rec.Publish, Engine: w.Engine}
	states.beforeUpdate = func() {
		if err := other.Observe(ctx, obs); err != nil {
			t.Errorf("the other worker: %v", err)
		}
	}
	if err := w.Observe(ctx, obs); !errors.Is(err, ErrConflict) {
		t.Fatalf("the slower worker: %v, want ErrConflict", err)
	}
	if len(rec.msgs) != 2 {
		t.Fatalf("%d messages, want the start and the winner's one", len(rec.msgs))
	}
	st, _, _ := states.Get(ctx, "r--t-k0")
	if len(st.Turns) != 2 {
		t.Fatalf("%d turns saved, want 2", len(st.Turns))
	}
	// Its redelivery then finds the observation stale and re-publishes.
	if err := w.Observe(ctx, obs); err != nil || len(rec.msgs) != 3 || rec.msgs[2].id != rec.msgs[1].id {
		t.Fatalf("redelivery after losing: %v, messages %v", err, rec.msgs)
	}
}

// TestSaveBeforePublish: a publish that fails after the save leaves the
// state saved, and the redelivery publishes the same message without a new
// policy call.
func TestSaveBeforePublish(t *testing.T) {
	ctx := context.Background()
	p := &counting{}
	w, states, rec := newWorker(p)
	rec.fail = errors.New("nats: timeout")
	if err := w.Start(ctx, request()); err == nil {
		t.Fatal("start with the bus down succeeded")
	}
	if _, _, err := states.Get(ctx, "r--t-k0"); err != nil {
		t.Fatalf("state not saved before the publish: %v", err)
	}
	rec.fail = nil
	if err := w.Start(ctx, request()); err != nil {
		t.Fatal(err)
	}
	if p.calls != 1 || len(rec.msgs) != 1 {
		t.Fatalf("policy called %d times, %d messages, want 1 and 1", p.calls, len(rec.msgs))
	}
}

// TestAdmitRefuses: a message the admission check refuses is neither
// started nor published.
func TestAdmitRefuses(t *testing.T) {
	w, states, rec := newWorker(&counting{})
	junk := errors.New("unknown run")
	w.Admit = func(context.Context, schemas.EpisodeClaim) error { return junk }
	if err := w.Start(context.Background(), request()); !errors.Is(err, junk) || len(rec.msgs) != 0 || states.last != 0 {
		t.Fatalf("start of a refused request: %v, %d messages, %d saves", err, len(rec.msgs), states.last)
	}
}

// TestSavedState: a worker steps its own episode from the state it saved
// last, without reading the bucket; an observation that is stale against
// that state but current against the bucket's (another worker moved the
// episode on) is decided on the bucket's state, not dropped.
func TestSavedState(t *testing.T) {
	ctx := context.Background()
	p := &counting{}
	w, states, rec := newWorker(p)
	if err := w.Start(ctx, request()); err != nil {
		t.Fatal(err)
	}
	gets := states.gets // Start's look for an existing episode
	if err := w.Observe(ctx, observation(rec.msgs[0].v.(schemas.ActionRequest))); err != nil {
		t.Fatal(err)
	}
	if states.gets != gets || len(rec.msgs) != 2 {
		t.Fatalf("observe read the bucket %d times, %d messages; want 0 reads and 2 messages", states.gets-gets, len(rec.msgs))
	}
	held, _, err := states.Get(ctx, "r--t-k0") // what w holds now: turn 1 pending
	if err != nil {
		t.Fatal(err)
	}
	// Another worker takes turn 1's observation and publishes turn 2.
	other := &Worker{States: states, Publish: rec.Publish, Engine: w.Engine}
	if err := other.Observe(ctx, observation(rec.msgs[1].v.(schemas.ActionRequest))); err != nil {
		t.Fatal(err)
	}
	turn2 := rec.msgs[2].v.(schemas.ActionRequest)
	if turn2.Ref.Turn != 2 {
		t.Fatalf("the other worker published turn %d, want 2", turn2.Ref.Turn)
	}
	// Positive control: against the state w holds, turn 2's observation is
	// stale: w must not decide it on that state alone.
	if _, _, err := w.Engine.Continue(ctx, held, observation(turn2)); !errors.Is(err, episode.ErrStale) {
		t.Fatalf("turn 2's observation against the held state: %v, want ErrStale", err)
	}
	// w gets turn 2's observation: it must fold it in (the third and last
	// turn of this 3-turn episode), not re-publish turn 1.
	if err := w.Observe(ctx, observation(turn2)); err != nil {
		t.Fatal(err)
	}
	st, _, err := states.Get(ctx, "r--t-k0")
	if err != nil || len(st.Turns) != 3 {
		t.Fatalf("after turn 2's observation: %v, %d turns saved; want 3", err, len(st.Turns))
	}
}

// TestDroppedRun (robust item 2): once the run is dropped, the next
// observation ends the episode (the turn kept, the policy not sampled
// again) with an infra_failure result saying why, and a request not yet
// started is refused with ErrDropped (nothing saved or published).
// The positive control: before the drop the same worker takes a normal
// step.
func TestDroppedRun(t *testing.T) {
	ctx := context.Background()
	p := &counting{}
	w, states, rec := newWorker(p)
	dropped := false
	w.Dropped = func(_ context.Context, run string) (bool, error) { return dropped && run == "r", nil }
	if err := w.Start(ctx, request()); err != nil {
		t.Fatal(err)
	}
	if err := w.Observe(ctx, observation(rec.msgs[0].v.(schemas.ActionRequest))); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.msgs[1].v.(schemas.ActionRequest); !ok || p.calls != 2 {
		t.Fatalf("before the drop: %T after %d policy calls, want a second action", rec.msgs[1].v, p.calls)
	}
	dropped = true
	if err := w.Observe(ctx, observation(rec.msgs[1].v.(schemas.ActionRequest))); err != nil {
		t.Fatal(err)
	}
	res, ok := rec.msgs[2].v.(schemas.EpisodeResult)
	if !ok || p.calls != 2 {
		t.Fatalf("after the drop: %T after %d policy calls, want a result and no new sample", rec.msgs[2].v, p.calls)
	}
	if res.Termination != schemas.EndInfraFailure || res.Error != DroppedMessage || len(res.Turns) != 2 || res.Turns[1].Stdout != "1\n" {
		t.Fatalf("result: termination %s, error %q, %d turns", res.Termination, res.Error, len(res.Turns))
	}
	saves := states.last
	req := request()
	req.EpisodeID = "r--u-k0"
	if err := w.Start(ctx, req); !errors.Is(err, ErrDropped) || len(rec.msgs) != 3 || states.last != saves {
		t.Fatalf("a request of the dropped run: %v, %d messages, %d saves", err, len(rec.msgs), states.last)
	}
}
