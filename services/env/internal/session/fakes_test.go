package session

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

// memStore is an in-memory Store with revisions.
type memStore struct {
	mu       sync.Mutex
	sessions map[string][]byte
	revs     map[string]uint64
	episodes map[string]string
	counters map[string]int
	rev      uint64
}

func newMemStore() *memStore {
	return &memStore{sessions: map[string][]byte{}, revs: map[string]uint64{}, episodes: map[string]string{}, counters: map[string]int{}}
}

func (m *memStore) Get(_ context.Context, id string) (Session, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.sessions[id]
	if !ok {
		return Session{}, 0, ErrNotFound
	}
	var s Session
	err := json.Unmarshal(b, &s) // a copy, as a real store returns
	return s, m.revs[id], err
}

func (m *memStore) put(s Session) uint64 {
	b, _ := json.Marshal(s)
	m.rev++
	m.sessions[s.ID], m.revs[s.ID] = b, m.rev
	return m.rev
}

func (m *memStore) Create(_ context.Context, s Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[s.ID]; ok {
		return ErrConflict
	}
	m.episodes[s.State.Request.EpisodeID] = s.ID
	m.put(s)
	return nil
}

func (m *memStore) Update(_ context.Context, s Session, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs[s.ID] != rev {
		return 0, ErrConflict
	}
	return m.put(s), nil
}

func (m *memStore) Delete(_ context.Context, s Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, s.ID)
	delete(m.episodes, s.State.Request.EpisodeID)
	return nil
}

func (m *memStore) List(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id := range m.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

func (m *memStore) ByEpisode(_ context.Context, ep string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.episodes[ep]
	if !ok {
		return "", ErrNotFound
	}
	return id, nil
}

func (m *memStore) NextSample(_ context.Context, run, task string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := run + "/" + task
	n := m.counters[k]
	m.counters[k]++
	return n, nil
}

type oneTask struct{ views []schemas.TaskView }

func (c oneTask) Find(id, _, _ string) (schemas.TaskView, error) {
	for _, v := range c.views {
		if v.ID == id {
			return v, nil
		}
	}
	return schemas.TaskView{}, ErrUnknownTask
}

func (c oneTask) List(string, string, int, int) ([]schemas.TaskView, int, error) {
	return c.views, len(c.views), nil
}
func (c oneTask) Datasets() []string { return []string{"npowerai"} }

// world is the bus and the other services, faked: an action is executed
// by printing the code's print(...) argument, the verifier accepts
// "42", and a finished episode is scored (correct when answered 42).
type world struct {
	t   *testing.T
	svc *Service

	mu        sync.Mutex
	actions   []schemas.ActionRequest
	results   []schemas.EpisodeResult
	runs      []schemas.RunSpec
	hold      bool // keep observations back (a server that died mid-step)
	publishes int
}

func (w *world) publish(ctx context.Context, subject, msgID string, v schemas.Validator) error {
	w.mu.Lock()
	w.publishes++
	hold := w.hold
	w.mu.Unlock()
	switch m := v.(type) {
	case schemas.ActionRequest:
		w.mu.Lock()
		dup := slices.ContainsFunc(w.actions, func(a schemas.ActionRequest) bool { return a.Ref == m.Ref })
		if !dup {
			w.actions = append(w.actions, m)
		}
		w.mu.Unlock()
		if dup || hold {
			return nil // the stream's duplicate window drops it
		}
		go w.observe(m)
	case schemas.EpisodeResult:
		w.mu.Lock()
		dup := slices.ContainsFunc(w.results, func(r schemas.EpisodeResult) bool { return r.Request.EpisodeID == m.Request.EpisodeID })
		if !dup {
			w.results = append(w.results, m)
		}
		w.mu.Unlock()
		if !dup {
			go w.score(m)
		}
	default:
		w.t.Errorf("published %T on %s", v, subject)
	}
	return nil
}

func (w *world) observe(a schemas.ActionRequest) {
	var p struct{ Code string }
	_ = json.Unmarshal(a.Action.Params, &p)
	out := strings.TrimSuffix(strings.TrimPrefix(p.Code, "print("), ")") + "\n"
	obs := schemas.Observation{Ref: a.Ref, Action: a.Action.Name, CheckWanted: a.Check,
		Result: schemas.ExecResult{Status: schemas.StatusOK, Stdout: out, Message: out}}
	if a.Check {
		ok := strings.TrimSpace(out) == "42"
		obs.Check = &schemas.Check{Accepted: ok, Answer: strings.TrimSpace(out), Verdict: map[bool]string{true: "match", false: "no match"}[ok]}
	}
	if err := w.svc.Observe(context.Background(), obs); err != nil {
		w.t.Errorf("observe: %v", err)
	}
}

func (w *world) score(r schemas.EpisodeResult) {
	out := schemas.OutcomeIncorrect
	switch {
	case r.Termination == schemas.EndAbandoned:
		out = schemas.OutcomeAbandoned
	case r.Termination == schemas.EndClosed:
		out = schemas.OutcomeTurnLimit
	case r.FinalAnswer == "42":
		out = schemas.OutcomeCorrect
	case r.Termination == schemas.EndTurnLimit:
		out = schemas.OutcomeTurnLimit
	}
	reward := 0.0
	if out == schemas.OutcomeCorrect {
		reward = 1
	}
	sc := schemas.Score{RunID: r.Request.RunID, EpisodeID: r.Request.EpisodeID, TaskID: r.Request.Task.ID, Dataset: r.Request.Task.Dataset,
		Outcome: out, Reward: reward, NumTurns: len(r.Turns), VerifierVersion: "test", Store: "/store"}
	if err := w.svc.Scored(context.Background(), sc); err != nil {
		w.t.Errorf("scored: %v", err)
	}
}

var task = schemas.TaskView{ID: "npowerai-t-1", Dataset: "npowerai", Split: "test", Question: "What is 6 times 7?",
	AnswerType: schemas.AnswerNumber, PermittedActions: []string{"validate_code", "terminal", "answer"}}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newWorld(t *testing.T, st *memStore, limits Limits) (*world, *clock) {
	t.Helper()
	w := &world{t: t}
	c := &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	if limits.StepWait == 0 {
		limits.StepWait = 10 * time.Second
	}
	w.svc = New(Deps{Store: st, Catalog: oneTask{[]schemas.TaskView{task}}, Publish: w.publish,
		Register: func(_ context.Context, spec schemas.RunSpec) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.runs = append(w.runs, spec)
			return nil
		},
		Worker: "env-test", DefaultRun: "env-run", Now: c.now}, limits)
	return w, c
}

func code(src string) string {
	b, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": src}})
	return string(b)
}

func answerReply(a string) string {
	return fmt.Sprintf(`{"action": "answer", "params": {"answer": %q}}`, a)
}
