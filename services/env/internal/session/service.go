package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
)

// Limits bound the server's sessions.
type Limits struct {
	// MaxSessions caps the live (not done) sessions; a create beyond it is
	// ErrTooMany.
	MaxSessions int
	// IdleTimeout: a live session no client touched for this long is
	// reaped and stored as abandoned.
	IdleTimeout time.Duration
	// KeepDone: a done session stays readable (and its steps replayable)
	// for this long after its last use, then is deleted.
	KeepDone time.Duration
	// StepWait bounds how long one step request waits for its execution
	// (ErrStepTimeout after; the execution goes on and a retry with the
	// same turn gets its answer).
	StepWait time.Duration
	// EpisodeTokenIDs bounds the token ids (prompt and completion) an
	// episode's turns hold together; a step past it is ErrInvalid
	// (default DefaultEpisodeTokenIDs).
	EpisodeTokenIDs int
}

// DefaultEpisodeTokenIDs is Limits.EpisodeTokenIDs' default: 15 turns of a
// 128k-token context and more.
const DefaultEpisodeTokenIDs = 1 << 21

// Deps are the service's collaborators.
type Deps struct {
	Store    Store
	Catalog  Catalog
	Publish  PublishFunc
	Register RunRegistry
	Log      *slog.Logger
	// Worker names this server in trajectories (EpisodeResult.Worker).
	Worker string
	// DefaultRun is the run of sessions that name none.
	DefaultRun string
	// DefaultModel is the model recorded for sessions that name none.
	DefaultModel string
	// DefaultEndOn is the end_on of sessions that name none; "" is
	// medgym's (schemas.DefaultOptions: answer).
	DefaultEndOn string
	// SystemAsUser folds the system prompt into the first user message
	// (as the llm-worker's flag of the same name).
	SystemAsUser bool
	Now          func() time.Time
}

// Service runs sessions.
type Service struct {
	deps   Deps
	limits Limits

	mu      sync.Mutex
	live    map[string]bool            // live session ids (the cap)
	waiters map[string][]chan struct{} // session id → steps waiting for a change
	runs    map[string]bool            // runs registered by this process
}

// New returns a service; Load counts the live sessions a previous process
// left.
func New(deps Deps, limits Limits) *Service {
	if deps.Now == nil {
		deps.Now = func() time.Time { return time.Now().UTC() }
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.DefaultModel == "" {
		deps.DefaultModel = "external"
	}
	if limits.EpisodeTokenIDs <= 0 {
		limits.EpisodeTokenIDs = DefaultEpisodeTokenIDs
	}
	if limits.StepWait <= 0 {
		limits.StepWait = 10 * time.Minute
	}
	return &Service{deps: deps, limits: limits, live: map[string]bool{}, waiters: map[string][]chan struct{}{}, runs: map[string]bool{}}
}

// Load reads the stored sessions into the live count (after a restart).
func (s *Service) Load(ctx context.Context) error {
	ids, err := s.deps.Store.List(ctx)
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	for _, id := range ids {
		sess, _, err := s.deps.Store.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("load session %s: %w", id, err)
		}
		if !sess.Done() {
			s.setLive(id, true)
		}
	}
	return nil
}

// Live returns the number of live sessions.
func (s *Service) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

func (s *Service) setLive(id string, live bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if live {
		s.live[id] = true
	} else {
		delete(s.live, id)
	}
}

// reserve takes a live slot for id, or fails with ErrTooMany.
func (s *Service) reserve(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limits.MaxSessions > 0 && len(s.live) >= s.limits.MaxSessions {
		return fmt.Errorf("%w: %d of %d", ErrTooMany, len(s.live), s.limits.MaxSessions)
	}
	s.live[id] = true
	return nil
}

// notify wakes the steps waiting on a session.
func (s *Service) notify(id string) {
	s.mu.Lock()
	ws := s.waiters[id]
	delete(s.waiters, id)
	s.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
}

// watch returns a channel closed at the session's next change and a
// func that stops watching.
func (s *Service) watch(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiters[id] = append(s.waiters[id], ch)
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		ws := s.waiters[id]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(s.waiters, id)
		} else {
			s.waiters[id] = ws
		}
	}
}

// awaiting is the Policy of a session: the reply a step brought, once,
// then ErrAwaitReply.
type awaiting struct{ reply *episode.Completion }

func (a *awaiting) Complete(context.Context, schemas.EpisodeRequest, []schemas.ChatMessage) (episode.Completion, error) {
	if a.reply == nil {
		return episode.Completion{}, episode.ErrAwaitReply
	}
	c := *a.reply
	a.reply = nil
	return c, nil
}

func (s *Service) engine(reply *episode.Completion) *episode.Engine {
	p := &awaiting{reply: reply}
	return &episode.Engine{
		Policy:       func(schemas.PolicySpec) (episode.Policy, error) { return p, nil },
		SystemAsUser: s.deps.SystemAsUser,
		Now:          s.deps.Now,
		Worker:       s.deps.Worker,
	}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Created is a new session's opening.
type Created struct {
	Session  Session
	Messages []schemas.ChatMessage
	Tools    []agent.Tool
}

// CreateRequest asks for a session.
type CreateRequest struct {
	TaskID, Dataset, Split string
	Options                Options
}

// Prompt is what a session of a task would open with, without opening one.
type Prompt struct {
	Task     schemas.TaskView
	Messages []schemas.ChatMessage
	Tools    []agent.Tool
}

// Prompt returns the opening messages and tools of a task under the
// request's options, built as Create (and the llm-worker) builds them; it
// opens no session and stores nothing.
func (s *Service) Prompt(r CreateRequest) (Prompt, error) {
	task, err := s.deps.Catalog.Find(r.TaskID, r.Dataset, r.Split)
	if err != nil {
		return Prompt{}, err
	}
	opts, _, _, err := r.Options.resolve(s.deps.DefaultRun, s.deps.DefaultModel, s.deps.DefaultEndOn)
	if err != nil {
		return Prompt{}, err
	}
	po := agent.EpisodePromptOptions(opts, s.deps.SystemAsUser)
	return Prompt{Task: task, Messages: agent.BuildMessages(task, po), Tools: agent.Tools(task, po)}, nil
}

// Create starts an episode of a task and returns its opening messages.
func (s *Service) Create(ctx context.Context, r CreateRequest) (Created, error) {
	task, err := s.deps.Catalog.Find(r.TaskID, r.Dataset, r.Split)
	if err != nil {
		return Created{}, err
	}
	opts, pol, runID, err := r.Options.resolve(s.deps.DefaultRun, s.deps.DefaultModel, s.deps.DefaultEndOn)
	if err != nil {
		return Created{}, err
	}
	id := newID()
	if err := s.reserve(id); err != nil {
		return Created{}, err
	}
	created := false
	defer func() {
		if !created {
			s.setLive(id, false)
		}
	}()
	if err := s.register(ctx, runID); err != nil {
		return Created{}, err
	}
	k, err := s.deps.Store.NextSample(ctx, runID, task.ID)
	if err != nil {
		return Created{}, fmt.Errorf("sample index of %s in run %s: %w", task.ID, runID, err)
	}
	req := schemas.EpisodeRequest{RunID: runID, EpisodeID: schemas.EpisodeID(runID, task.ID, k), SampleIndex: k,
		Task: task, Policy: pol, Options: opts, RequestedAt: s.deps.Now()}
	if err := req.Validate(); err != nil {
		return Created{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	st, step, err := s.engine(nil).Start(ctx, req)
	if err != nil || step.Action != nil || step.Result != nil {
		return Created{}, fmt.Errorf("start episode %s: the engine did not wait for the first reply (%v)", req.EpisodeID, err)
	}
	now := s.deps.Now()
	sess := Session{ID: id, State: st, Tags: r.Options.Tags, CreatedAt: now, LastSeen: now}
	if err := s.deps.Store.Create(ctx, sess); err != nil {
		return Created{}, fmt.Errorf("save session: %w", err)
	}
	created = true
	return Created{Session: sess, Messages: st.Messages, Tools: agent.Tools(task, agent.EpisodePromptOptions(opts, s.deps.SystemAsUser))}, nil
}

// register records a run for the workers once per process.
func (s *Service) register(ctx context.Context, runID string) error {
	s.mu.Lock()
	done := s.runs[runID]
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.deps.Register(ctx, RunSpecFor(runID, s.deps.Catalog.Datasets(), s.deps.DefaultModel, s.deps.Now())); err != nil {
		return fmt.Errorf("register run %s: %w", runID, err)
	}
	s.mu.Lock()
	s.runs[runID] = true
	s.mu.Unlock()
	return nil
}

// MaxSamples is the sample count of an environment run's record: the
// sessions of one task in one run are its samples 0, 1, ...
const MaxSamples = 1 << 30

// RunSpecFor is the record of an environment run: every dataset the server
// offers, any task, up to MaxSamples samples each. It is recorded as
// finished, so no dispatcher ever plans it; the workers only need it to
// admit the run's messages (schemas.RunSpec.Admits).
func RunSpecFor(runID string, datasets []string, model string, now time.Time) schemas.RunSpec {
	return schemas.RunSpec{RunID: runID, Datasets: slices.Clone(datasets), Samples: MaxSamples,
		Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: model}, Options: schemas.DefaultOptions(), SubmittedAt: now}
}

// Get returns a session.
func (s *Service) Get(ctx context.Context, id string) (Session, error) {
	sess, _, err := s.load(ctx, id)
	return sess, err
}

func (s *Service) load(ctx context.Context, id string) (Session, uint64, error) {
	if !schemas.ValidToken(id) {
		return Session{}, 0, fmt.Errorf("%w %q", ErrUnknownSession, id)
	}
	sess, rev, err := s.deps.Store.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return sess, 0, fmt.Errorf("%w %q", ErrUnknownSession, id)
	}
	if err != nil {
		return sess, 0, fmt.Errorf("load session %s: %w", id, err)
	}
	return sess, rev, nil
}
