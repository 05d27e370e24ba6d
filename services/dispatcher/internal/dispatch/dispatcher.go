package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Errors the stores return; their adapters map the transport's own.
var (
	// ErrNotFound: no record under the key.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a create found the key taken, or an update found a
	// newer revision than the one it read.
	ErrConflict = errors.New("revision conflict")
)

// Errors DeadLetter returns for a dead letter it cannot account for; the
// service acks them as junk.
var (
	// ErrDeadScore: a dead-lettered score, dropped on purpose.
	ErrDeadScore = errors.New("dead-lettered score dropped")
	// ErrUnknownEpisode: the dead letter names no episode the dispatcher
	// can find.
	ErrUnknownEpisode = errors.New("dead letter without a known episode")
	// ErrUnknownRun: the dead letter's episode belongs to no recorded run.
	ErrUnknownRun = errors.New("dead letter for an unknown run")
)

// RunStore holds one status record per run, read and written at a
// revision: Create fails with ErrConflict when the run exists, Update when
// the record moved on since rev; Get fails with ErrNotFound.
type RunStore interface {
	// Runs lists the recorded run ids (none is not an error).
	Runs(ctx context.Context) ([]string, error)
	Get(ctx context.Context, runID string) (schemas.RunStatus, uint64, error)
	Create(ctx context.Context, st schemas.RunStatus) (uint64, error)
	Update(ctx context.Context, st schemas.RunStatus, rev uint64) (uint64, error)
}

// EpisodeStore holds the runs' completion bitmaps (which planned episodes
// are scored), a chunk per key (see ChunkKey), with the same revision
// semantics as RunStore.
type EpisodeStore interface {
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	Create(ctx context.Context, key string, chunk []byte) (uint64, error)
	Update(ctx context.Context, key string, chunk []byte, rev uint64) (uint64, error)
}

// PublishFunc publishes v on subject, deduplicated by msgID.
type PublishFunc func(ctx context.Context, subject, msgID string, v schemas.Validator) error

// Deps are what a Dispatcher needs from the outside world.
type Deps struct {
	Runs     RunStore
	Episodes EpisodeStore
	Publish  PublishFunc
	// Purge withdraws the run's episode requests no worker has taken.
	Purge func(ctx context.Context, runID string) error
	// Load reads a dataset's tasks for a run.
	Load func(ctx context.Context, spec schemas.RunSpec, dataset string) ([]tasks.Task, error)
	// Refused, when set, counts a score not counted, by reason.
	Refused func(reason string)
	// Pipeline, when set, lets Reconcile find episodes lost in the
	// pipeline.
	Pipeline Pipeline
	// Lost, when set, counts an episode Reconcile recorded as lost.
	Lost func()
	Log  *slog.Logger
}

// Config tunes a Dispatcher.
type Config struct {
	// Tick is how often a run's admission loop re-counts scores when no
	// score event woke it (default 500 ms).
	Tick time.Duration
	// MaxEpisodes bounds tasks × samples of one run (default
	// DefaultMaxEpisodes); a larger run is refused.
	MaxEpisodes int
	// MaxInFlightTotal bounds the episodes in flight across the runs this
	// dispatcher drives, shared max-min fairly among them (default
	// DefaultMaxInFlightTotal; negative: no bound beyond each run's own
	// max_in_flight).
	MaxInFlightTotal int
}

// Dispatcher runs runs: it records submitted runs, drives each unfinished
// one's admission loop, counts scores and turns dead letters into
// infra_failure results. Several dispatchers may share the stores: every
// write is a compare-and-set.
type Dispatcher struct {
	deps Deps
	cfg  Config
	done completions

	// runCtx is the dispatcher's lifetime: admission loops outlive the
	// handler call that started them.
	runCtx context.Context
	// manual: startPlan registers runs without starting their loops (the
	// tests step them).
	manual bool

	mu     sync.Mutex
	active map[string]*runState
	plans  map[string]*Plan // recently used plans, for scores and dead letters
	// suspects: per run, the episodes the last reconciliation found
	// unscored with no message in play (see Reconcile).
	suspects map[string]map[int]bool
	// recorded: per run, the episodes Reconcile recorded as lost.
	recorded map[string]map[int]bool
	wg       sync.WaitGroup
}

type runState struct {
	plan *Plan
	wake chan struct{}
	// demand is the in-flight slots the run could use at its last step
	// (guarded by Dispatcher.mu; see admission).
	demand int
}

// New returns a Dispatcher whose admission loops run until ctx is done.
func New(ctx context.Context, deps Deps, cfg Config) *Dispatcher {
	if cfg.Tick == 0 {
		cfg.Tick = 500 * time.Millisecond
	}
	if cfg.MaxEpisodes <= 0 {
		cfg.MaxEpisodes = DefaultMaxEpisodes
	}
	if cfg.MaxInFlightTotal == 0 {
		cfg.MaxInFlightTotal = DefaultMaxInFlightTotal
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{deps: deps, cfg: cfg, done: completions{deps.Episodes}, runCtx: ctx,
		active: map[string]*runState{}, plans: map[string]*Plan{}, suspects: map[string]map[int]bool{}, recorded: map[string]map[int]bool{}}
}

// Wait returns when every admission loop has returned (after the context
// given to New is done, or when their runs are over).
func (d *Dispatcher) Wait() { d.wg.Wait() }

// Resume restarts the admission loops of unfinished runs.
func (d *Dispatcher) Resume(ctx context.Context) error {
	keys, err := d.deps.Runs.Runs(ctx)
	if err != nil {
		return fmt.Errorf("dispatcher: list runs: %w", err)
	}
	for _, k := range keys {
		st, _, err := d.deps.Runs.Get(ctx, k)
		if err != nil || st.Finished || st.Error != "" {
			continue
		}
		d.deps.Log.Info("resuming run", "run", k, "published", st.Published, "total", st.Total)
		if err := d.start(ctx, st.Spec); err != nil {
			// A spec recorded before it was refused (e.g. too large for
			// this dispatcher) is marked failed instead of tried forever.
			d.reject(ctx, k, err)
		}
	}
	return nil
}

func (d *Dispatcher) status(ctx context.Context, runID string) (schemas.RunStatus, uint64, error) {
	return d.deps.Runs.Get(ctx, runID)
}

func (d *Dispatcher) put(ctx context.Context, st schemas.RunStatus, rev uint64) (uint64, error) {
	st.UpdatedAt = time.Now().UTC()
	if rev == 0 {
		return d.deps.Runs.Create(ctx, st)
	}
	return d.deps.Runs.Update(ctx, st, rev)
}

// reject records that a run cannot be planned, or has failed: it ends the
// run with cause as its error, unless the run already ended.
func (d *Dispatcher) reject(ctx context.Context, runID string, cause error) {
	for range casTries {
		st, rev, err := d.status(ctx, runID)
		if err != nil {
			d.deps.Log.Error("reject run", "run", runID, "err", err, "cause", cause)
			return
		}
		if st.Finished {
			return // finished, or failed for an earlier reason, which stays
		}
		st.Error, st.Finished = cause.Error(), true
		if _, err := d.put(ctx, st, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			d.deps.Log.Error("reject run", "run", runID, "err", err, "cause", cause)
			return
		}
		d.deps.Log.Error("run rejected", "run", runID, "err", cause)
		return
	}
}

// plan loads and selects the run's tasks. It checks the samples against
// the bound before loading any task, so an absurd K fails fast.
func (d *Dispatcher) plan(ctx context.Context, spec schemas.RunSpec) (*Plan, error) {
	if _, err := Size(1, spec.Samples, d.cfg.MaxEpisodes); err != nil {
		return nil, fmt.Errorf("run %s: %w", spec.RunID, err)
	}
	var all []tasks.Task
	for _, ds := range spec.Datasets {
		ts, err := d.deps.Load(ctx, spec, ds)
		if err != nil {
			return nil, err
		}
		all = append(all, ts...)
	}
	sel := tasks.Select(spec, all) // the rule medgym run's preflight counts with too
	if len(sel) == 0 {
		return nil, fmt.Errorf("run %s selects no task (datasets %v, split %q)", spec.RunID, spec.Datasets, spec.Split)
	}
	if err := CheckReferences(spec, sel); err != nil {
		return nil, err
	}
	if err := tasks.CheckRunLabels(sel, spec.Options.VerifierMode == "upstream", spec.Options.LabelSets); err != nil {
		return nil, fmt.Errorf("run %s: %w", spec.RunID, err)
	}
	return NewPlan(spec, sel, d.cfg.MaxEpisodes)
}

// maxCachedPlans bounds the plans kept for runs this process does not
// drive (their scores and dead letters still need them).
const maxCachedPlans = 64

// planFor returns the plan of a recorded run, from memory when it can.
func (d *Dispatcher) planFor(ctx context.Context, spec schemas.RunSpec) (*Plan, error) {
	d.mu.Lock()
	p := d.plans[spec.RunID]
	d.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := d.plan(ctx, spec)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.plans) >= maxCachedPlans {
		for id := range d.plans {
			if d.active[id] == nil {
				delete(d.plans, id)
			}
		}
	}
	d.plans[spec.RunID] = p
	return p, nil
}

// Submit registers a run (idempotently) and starts its loop. A run that
// cannot be planned is recorded as failed, not returned as an error.
func (d *Dispatcher) Submit(ctx context.Context, spec schemas.RunSpec) error {
	if st, _, err := d.status(ctx, spec.RunID); err == nil {
		if st.Finished || st.Error != "" {
			return nil
		}
		return d.start(ctx, st.Spec) // same id again: continue the recorded run
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	st := schemas.RunStatus{Spec: spec}
	p, err := d.planFor(ctx, spec)
	if err != nil {
		st.Error = err.Error()
		st.Finished = true
		if _, perr := d.put(ctx, st, 0); perr != nil && !errors.Is(perr, ErrConflict) {
			return perr
		}
		d.deps.Log.Error("run rejected", "run", spec.RunID, "err", err)
		return nil
	}
	st.Total = p.Len()
	if _, err := d.put(ctx, st, 0); err != nil && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("record run %s: %w", spec.RunID, err)
	}
	d.deps.Log.Info("run accepted", "run", spec.RunID, "episodes", st.Total)
	d.startPlan(p)
	return nil
}

func (d *Dispatcher) start(ctx context.Context, spec schemas.RunSpec) error {
	d.mu.Lock()
	_, running := d.active[spec.RunID]
	d.mu.Unlock()
	if running {
		return nil
	}
	p, err := d.planFor(ctx, spec)
	if err != nil {
		return err
	}
	d.startPlan(p)
	return nil
}

func (d *Dispatcher) startPlan(p *Plan) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.active[p.Spec.RunID]; ok {
		return
	}
	maxIn := p.Spec.MaxInFlight
	if maxIn <= 0 {
		maxIn = defaultRunInFlight
	}
	rs := &runState{plan: p, wake: make(chan struct{}, 1), demand: min(maxIn, p.Len())}
	d.active[p.Spec.RunID] = rs
	d.plans[p.Spec.RunID] = p
	if d.manual {
		return
	}
	d.wg.Go(func() {
		defer func() {
			d.mu.Lock()
			delete(d.active, p.Spec.RunID)
			delete(d.plans, p.Spec.RunID)
			delete(d.suspects, p.Spec.RunID)
			delete(d.recorded, p.Spec.RunID)
			d.mu.Unlock()
			d.wakeAll() // the others' shares grow
		}()
		d.loop(context.WithoutCancel(d.runCtx), d.runCtx.Done(), rs)
	})
}

// Wake makes the run's admission loop re-count its scores now (a no-op for
// a run this dispatcher does not drive). A wake-up only makes the loop
// re-read the stores, so a forged one changes nothing.
func (d *Dispatcher) Wake(runID string) {
	d.mu.Lock()
	rs := d.active[runID]
	d.mu.Unlock()
	if rs != nil {
		select {
		case rs.wake <- struct{}{}:
		default:
		}
	}
}

// DeadLetter turns a message no worker could process into an infra_failure
// result for its episode, so the run still accounts for it. dl.Subject and
// dl.Reason come from the dead letter's headers. A dead letter it cannot
// account for fails with ErrDeadScore, ErrUnknownEpisode or ErrUnknownRun.
// A dead-lettered result (a finished episode the verifier could not store)
// fails the run instead.
func (d *Dispatcher) DeadLetter(ctx context.Context, dl DeadLetter) error {
	if dl.IsScore() {
		// A score that could not be counted is no episode's only record
		// (the result it scores is stored): recording an infra_failure
		// for it would let a malformed score replace a real outcome.
		return fmt.Errorf("%w: from %s (reason: %s)", ErrDeadScore, dl.Subject, dl.Reason)
	}
	req, ok := d.requestFor(ctx, dl)
	if !ok {
		return fmt.Errorf("%w: from %s (reason: %s)", ErrUnknownEpisode, dl.Subject, dl.Reason)
	}
	if _, _, err := d.status(ctx, req.RunID); errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: from %s, run %s (reason: %s)", ErrUnknownRun, dl.Subject, req.RunID, dl.Reason)
	}
	if dl.IsResult() {
		// The verifier gave up storing a finished episode (its store
		// refused every row for its --store-give-up): an infra_failure
		// for it could not be stored either, so the run cannot complete.
		d.reject(ctx, req.RunID, fmt.Errorf("the verifier could not store episode %s: %s", req.EpisodeID, dl.Reason))
		return nil
	}
	res := schemas.EpisodeResult{Request: req, Termination: schemas.EndInfraFailure,
		Error: fmt.Sprintf("dead letter from %s: %s", dl.Subject, dl.Reason), StartedAt: req.RequestedAt, FinishedAt: time.Now().UTC()}
	d.deps.Log.Warn("episode dead-lettered: recording infra_failure", "run", req.RunID, "episode", req.EpisodeID, "reason", dl.Reason)
	return d.deps.Publish(ctx, schemas.EpisodeCompleted.For(req.RunID), schemas.ResultMsgID(req.EpisodeID), res)
}

func (d *Dispatcher) requestFor(ctx context.Context, dl DeadLetter) (schemas.EpisodeRequest, bool) {
	if dl.Request != nil {
		return *dl.Request, true
	}
	if dl.Ref == nil {
		return schemas.EpisodeRequest{}, false
	}
	st, _, err := d.status(ctx, dl.Ref.RunID)
	if err != nil {
		return schemas.EpisodeRequest{}, false
	}
	p, err := d.planFor(ctx, st.Spec)
	if err != nil {
		return schemas.EpisodeRequest{}, false
	}
	i, ok := p.Lookup(dl.Ref.EpisodeID)
	if !ok {
		return schemas.EpisodeRequest{}, false
	}
	return p.Request(i, time.Now().UTC()), true
}
