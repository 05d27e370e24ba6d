package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/dispatcher/internal/dispatch"
	"github.com/medgym/medgym/tasks"
)

// Config of the dispatcher.
type Config struct {
	// Metrics, when set, measures the handlers (see bus.Metrics).
	Metrics    *bus.Metrics
	DataRoot   string
	LibraryDir string
	// Tick is how often a run's admission loop re-counts scores when no
	// score event woke it (default 500 ms).
	Tick time.Duration
	// MaxEpisodes bounds tasks × samples of one run (default
	// dispatch.DefaultMaxEpisodes); a larger run is refused.
	MaxEpisodes int
}

// Dispatcher runs runs.
type Dispatcher struct {
	conn *bus.Conn
	cfg  Config
	log  *slog.Logger
	kv   jetstream.KeyValue
	done completions
	// refused counts scores that were not counted, by reason.
	refused *prometheus.CounterVec

	// runCtx is the service's lifetime: admission loops outlive the
	// handler call that started them.
	runCtx context.Context

	mu     sync.Mutex
	active map[string]*runState
	plans  map[string]*dispatch.Plan // recently used plans, for scores and dead letters
	wg     sync.WaitGroup
}

type runState struct {
	plan *dispatch.Plan
	wake chan struct{}
}

// Run serves until ctx is done.
func Run(ctx context.Context, conn *bus.Conn, cfg Config, log *slog.Logger) error {
	if cfg.Tick == 0 {
		cfg.Tick = 500 * time.Millisecond
	}
	if cfg.MaxEpisodes <= 0 {
		cfg.MaxEpisodes = dispatch.DefaultMaxEpisodes
	}
	kv, err := conn.JS.KeyValue(ctx, schemas.BucketRuns)
	if err != nil {
		return fmt.Errorf("dispatcher: runs bucket: %w", err)
	}
	doneKV, err := conn.JS.KeyValue(ctx, schemas.BucketCompletions)
	if err != nil {
		return fmt.Errorf("dispatcher: completions bucket: %w", err)
	}
	d := &Dispatcher{conn: conn, cfg: cfg, log: log, kv: kv, done: completions{doneKV}, runCtx: ctx,
		active: map[string]*runState{}, plans: map[string]*dispatch.Plan{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "medgym_dispatcher_scores_refused_total",
			Help: "Scores the dispatcher did not count, by reason (unknown run, unplanned episode, duplicate, ...)."}, []string{"reason"})}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Registry.Register(d.refused); err != nil {
			return fmt.Errorf("dispatcher: metrics: %w", err)
		}
	}
	defer d.wg.Wait()

	// Wake a run's loop on every score (core subscription: every dispatcher
	// hears it). A wake-up only makes the loop re-count from the
	// completions bucket, so a forged one changes nothing.
	sub, err := conn.NC.Subscribe(schemas.EpisodeScored.Wildcard(), func(m *nats.Msg) {
		var sc schemas.Score
		if json.Unmarshal(m.Data, &sc) == nil {
			d.wakeRun(sc.RunID)
		}
	})
	if err != nil {
		return fmt.Errorf("dispatcher: subscribe scores: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	stopAdv, err := bus.WatchMaxDeliveries(ctx, conn, log)
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	defer stopAdv()

	if err := d.resume(ctx); err != nil {
		return err
	}
	rt, err := bus.NewRouter(conn, log)
	if err != nil {
		return err
	}
	rt.Metrics = cfg.Metrics
	if err := bus.Handle(rt, "dispatcher-runs", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamRuns, Durable: schemas.DurableDispatcherRuns, Subject: schemas.RunSubmitted}},
		func(ctx context.Context, spec schemas.RunSpec) error { return d.submit(ctx, spec) }); err != nil {
		return err
	}
	if err := bus.Handle(rt, "dispatcher-scores", bus.HandlerOptions{Concurrency: 4, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: schemas.DurableDispatcherScores, Subject: schemas.EpisodeScored, MaxDeliver: -1}},
		d.scored); err != nil {
		return err
	}
	if err := bus.Handle(rt, "dispatcher-deadletters", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamDeadLetter, Durable: schemas.DurableDispatcherDead, Subject: schemas.DeadLetter}},
		d.deadLetter); err != nil {
		return err
	}
	log.Info("dispatcher running", "max_episodes", cfg.MaxEpisodes)
	return rt.Run(ctx)
}

// resume restarts the admission loops of unfinished runs.
func (d *Dispatcher) resume(ctx context.Context) error {
	keys, err := d.kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dispatcher: list runs: %w", err)
	}
	for _, k := range keys {
		st, _, err := d.status(ctx, k)
		if err != nil || st.Finished || st.Error != "" {
			continue
		}
		d.log.Info("resuming run", "run", k, "published", st.Published, "total", st.Total)
		if err := d.start(ctx, st.Spec); err != nil {
			// A spec recorded before it was refused (e.g. too large for
			// this dispatcher) is marked failed instead of tried forever.
			d.reject(ctx, k, err)
		}
	}
	return nil
}

func (d *Dispatcher) status(ctx context.Context, runID string) (schemas.RunStatus, uint64, error) {
	e, err := d.kv.Get(ctx, runID)
	if err != nil {
		return schemas.RunStatus{}, 0, err
	}
	var st schemas.RunStatus
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return st, 0, fmt.Errorf("decode run status %s: %w", runID, err)
	}
	return st, e.Revision(), nil
}

func (d *Dispatcher) put(ctx context.Context, st schemas.RunStatus, rev uint64) (uint64, error) {
	st.UpdatedAt = time.Now().UTC()
	b, err := json.Marshal(st)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return d.kv.Create(ctx, st.Spec.RunID, b)
	}
	return d.kv.Update(ctx, st.Spec.RunID, b, rev)
}

// reject records that a run cannot be planned, or has failed: it ends the
// run with cause as its error, unless the run already ended.
func (d *Dispatcher) reject(ctx context.Context, runID string, cause error) {
	for range casTries {
		st, rev, err := d.status(ctx, runID)
		if err != nil {
			d.log.Error("reject run", "run", runID, "err", err, "cause", cause)
			return
		}
		if st.Finished {
			return // finished, or failed for an earlier reason, which stays
		}
		st.Error, st.Finished = cause.Error(), true
		if _, err := d.put(ctx, st, rev); errors.Is(err, jetstream.ErrKeyExists) {
			continue
		} else if err != nil {
			d.log.Error("reject run", "run", runID, "err", err, "cause", cause)
			return
		}
		d.log.Error("run rejected", "run", runID, "err", cause)
		return
	}
}

// plan loads and selects the run's tasks. It checks the samples against
// the bound before loading any task, so an absurd K fails fast.
func (d *Dispatcher) plan(ctx context.Context, spec schemas.RunSpec) (*dispatch.Plan, error) {
	if _, err := dispatch.Size(1, spec.Samples, d.cfg.MaxEpisodes); err != nil {
		return nil, fmt.Errorf("run %s: %w", spec.RunID, err)
	}
	var all []tasks.Task
	for _, ds := range spec.Datasets {
		ts, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: spec.Split, DataRoot: d.cfg.DataRoot, TasksDir: spec.TasksDir, LibraryDir: d.cfg.LibraryDir})
		if err != nil {
			return nil, err
		}
		all = append(all, ts...)
	}
	sel := dispatch.Select(spec, all)
	if len(sel) == 0 {
		return nil, fmt.Errorf("run %s selects no task (datasets %v, split %q)", spec.RunID, spec.Datasets, spec.Split)
	}
	if err := dispatch.CheckReferences(spec, sel); err != nil {
		return nil, err
	}
	return dispatch.NewPlan(spec, sel, d.cfg.MaxEpisodes)
}

// maxCachedPlans bounds the plans kept for runs this process does not
// drive (their scores and dead letters still need them).
const maxCachedPlans = 64

// planFor returns the plan of a recorded run, from memory when it can.
func (d *Dispatcher) planFor(ctx context.Context, spec schemas.RunSpec) (*dispatch.Plan, error) {
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

// submit registers a run (idempotently) and starts its loop.
func (d *Dispatcher) submit(ctx context.Context, spec schemas.RunSpec) error {
	if st, _, err := d.status(ctx, spec.RunID); err == nil {
		if st.Finished || st.Error != "" {
			return nil
		}
		return d.start(ctx, st.Spec) // same id again: continue the recorded run
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	st := schemas.RunStatus{Spec: spec}
	p, err := d.planFor(ctx, spec)
	if err != nil {
		st.Error = err.Error()
		st.Finished = true
		if _, perr := d.put(ctx, st, 0); perr != nil && !errors.Is(perr, jetstream.ErrKeyExists) {
			return perr
		}
		d.log.Error("run rejected", "run", spec.RunID, "err", err)
		return nil
	}
	st.Total = p.Len()
	if _, err := d.put(ctx, st, 0); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("record run %s: %w", spec.RunID, err)
	}
	d.log.Info("run accepted", "run", spec.RunID, "episodes", st.Total)
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

func (d *Dispatcher) startPlan(p *dispatch.Plan) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.active[p.Spec.RunID]; ok {
		return
	}
	rs := &runState{plan: p, wake: make(chan struct{}, 1)}
	d.active[p.Spec.RunID] = rs
	d.plans[p.Spec.RunID] = p
	d.wg.Go(func() {
		defer func() {
			d.mu.Lock()
			delete(d.active, p.Spec.RunID)
			delete(d.plans, p.Spec.RunID)
			d.mu.Unlock()
		}()
		d.loop(context.WithoutCancel(d.runCtx), d.runCtx.Done(), rs)
	})
}

func (d *Dispatcher) wakeRun(runID string) {
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

// deadLetter turns a message no worker could process into an infra_failure
// result for its episode, so the run still accounts for it.
func (d *Dispatcher) deadLetter(ctx context.Context, dl DeadLetter) error {
	md := bus.Metadata(ctx)
	dl.Subject, dl.Reason = md[bus.HeaderDeadSubject], md[bus.HeaderDeadReason]
	if strings.HasPrefix(dl.Subject, string(schemas.EpisodeScored)+".") {
		// A score that could not be counted is no episode's only record
		// (the result it scores is stored): recording an infra_failure
		// for it would let a malformed score replace a real outcome.
		return bus.Junkf(bus.JunkDeadLetter, "dead-lettered score from %s dropped (reason: %s)", dl.Subject, dl.Reason)
	}
	req, ok := d.requestFor(ctx, dl)
	if !ok {
		return bus.Junkf(bus.JunkUnknownEpisode, "dead letter from %s without a known episode (reason: %s)", dl.Subject, dl.Reason)
	}
	if _, _, err := d.status(ctx, req.RunID); errors.Is(err, jetstream.ErrKeyNotFound) {
		return bus.Junkf(bus.JunkUnknownRun, "dead letter from %s for unknown run %s (reason: %s)", dl.Subject, req.RunID, dl.Reason)
	}
	if strings.HasPrefix(dl.Subject, string(schemas.EpisodeCompleted)+".") {
		// The verifier gave up storing a finished episode (its store
		// refused every row for its --store-give-up): an infra_failure
		// for it could not be stored either, so the run cannot complete.
		d.reject(ctx, req.RunID, fmt.Errorf("the verifier could not store episode %s: %s", req.EpisodeID, dl.Reason))
		return nil
	}
	res := schemas.EpisodeResult{Request: req, Termination: schemas.EndInfraFailure,
		Error: fmt.Sprintf("dead letter from %s: %s", dl.Subject, dl.Reason), StartedAt: req.RequestedAt, FinishedAt: time.Now().UTC()}
	d.log.Warn("episode dead-lettered: recording infra_failure", "run", req.RunID, "episode", req.EpisodeID, "reason", dl.Reason)
	return d.conn.Publish(ctx, schemas.EpisodeCompleted.For(req.RunID), schemas.MsgID(req.EpisodeID, "result"), res)
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
