package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
}

// Dispatcher runs runs.
type Dispatcher struct {
	conn *bus.Conn
	cfg  Config
	log  *slog.Logger
	kv   jetstream.KeyValue

	// runCtx is the service's lifetime: admission loops outlive the
	// handler call that started them.
	runCtx context.Context

	mu     sync.Mutex
	active map[string]*runState
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
	kv, err := conn.JS.KeyValue(ctx, schemas.BucketRuns)
	if err != nil {
		return fmt.Errorf("dispatcher: runs bucket: %w", err)
	}
	d := &Dispatcher{conn: conn, cfg: cfg, log: log, kv: kv, runCtx: ctx, active: map[string]*runState{}}
	defer d.wg.Wait()

	// Wake a run's loop on every score (core subscription: every dispatcher hears it).
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
	if err := bus.Handle(rt, "dispatcher-deadletters", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamDeadLetter, Durable: schemas.DurableDispatcherDead, Subject: schemas.DeadLetter}},
		d.deadLetter); err != nil {
		return err
	}
	log.Info("dispatcher running")
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
			d.log.Error("resume run", "run", k, "err", err)
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

// plan loads and selects the run's tasks.
func (d *Dispatcher) plan(ctx context.Context, spec schemas.RunSpec) (*dispatch.Plan, error) {
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
	return dispatch.NewPlan(spec, sel), nil
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
	p, err := d.plan(ctx, spec)
	if err != nil {
		st.Error = err.Error()
		st.Finished = true
		if _, perr := d.put(ctx, st, 0); perr != nil && !errors.Is(perr, jetstream.ErrKeyExists) {
			return perr
		}
		d.log.Error("run rejected", "run", spec.RunID, "err", err)
		return nil
	}
	st.Total = len(p.Episodes)
	if _, err := d.put(ctx, st, 0); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("record run %s: %w", spec.RunID, err)
	}
	d.log.Info("run accepted", "run", spec.RunID, "episodes", st.Total)
	return d.startPlan(ctx, p)
}

func (d *Dispatcher) start(ctx context.Context, spec schemas.RunSpec) error {
	d.mu.Lock()
	_, running := d.active[spec.RunID]
	d.mu.Unlock()
	if running {
		return nil
	}
	p, err := d.plan(ctx, spec)
	if err != nil {
		return err
	}
	return d.startPlan(ctx, p)
}

func (d *Dispatcher) startPlan(ctx context.Context, p *dispatch.Plan) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.active[p.Spec.RunID]; ok {
		return nil
	}
	rs := &runState{plan: p, wake: make(chan struct{}, 1)}
	d.active[p.Spec.RunID] = rs
	d.wg.Go(func() {
		defer func() {
			d.mu.Lock()
			delete(d.active, p.Spec.RunID)
			d.mu.Unlock()
		}()
		if err := d.loop(context.WithoutCancel(d.runCtx), d.runCtx.Done(), rs); err != nil {
			d.log.Error("run loop", "run", p.Spec.RunID, "err", err)
		}
	})
	return nil
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

// loop is a run's admission control: publish while fewer than MaxInFlight
// episodes are unscored; finish when every episode has a score.
func (d *Dispatcher) loop(ctx context.Context, stop <-chan struct{}, rs *runState) error {
	p := rs.plan
	run := p.Spec.RunID
	maxIn := p.Spec.MaxInFlight
	if maxIn <= 0 {
		maxIn = 64
	}
	tick := time.NewTicker(d.cfg.Tick)
	defer tick.Stop()
	for {
		st, rev, err := d.status(ctx, run)
		if err != nil {
			return err
		}
		if scored, err := d.countScores(ctx, run); err != nil {
			d.log.Warn("count scores", "run", run, "err", err)
		} else {
			st.Done = scored
		}
		for st.Published < len(p.Episodes) && st.Published-st.Done < maxIn {
			req := p.Request(st.Published, time.Now().UTC())
			if err := d.conn.Publish(ctx, schemas.EpisodeRequested.For(run), schemas.MsgID(run, req.EpisodeID, req.Attempt), req); err != nil {
				d.log.Warn("publish episode", "run", run, "episode", req.EpisodeID, "err", err)
				break
			}
			st.Published++
		}
		st.Finished = st.Done >= len(p.Episodes)
		if _, err := d.put(ctx, st, rev); err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				d.log.Warn("update run status", "run", run, "err", err)
			}
			continue // another dispatcher moved it on: re-read
		}
		if st.Finished {
			d.log.Info("run finished", "run", run, "episodes", st.Done)
			return nil
		}
		select {
		case <-stop:
			return nil
		case <-rs.wake:
		case <-tick.C:
		}
	}
}

// countScores counts the run's scored episodes from the scores stream: the
// verifier publishes one score per episode with the episode id as message
// id, so the stream's per-subject count is the number of distinct episodes.
func (d *Dispatcher) countScores(ctx context.Context, run string) (int, error) {
	s, err := d.conn.JS.Stream(ctx, schemas.StreamScores)
	if err != nil {
		return 0, err
	}
	subj := schemas.EpisodeScored.For(run)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, err
	}
	return int(info.State.Subjects[subj]), nil
}

// deadLetter turns a message no worker could process into an infra_failure
// result for its episode, so the run still accounts for it.
func (d *Dispatcher) deadLetter(ctx context.Context, dl DeadLetter) error {
	md := bus.Metadata(ctx)
	dl.Subject, dl.Reason = md[bus.HeaderDeadSubject], md[bus.HeaderDeadReason]
	req, ok := d.requestFor(ctx, dl)
	if !ok {
		return bus.Junkf(bus.JunkUnknownEpisode, "dead letter from %s without a known episode (reason: %s)", dl.Subject, dl.Reason)
	}
	if _, _, err := d.status(ctx, req.RunID); errors.Is(err, jetstream.ErrKeyNotFound) {
		return bus.Junkf(bus.JunkUnknownRun, "dead letter from %s for unknown run %s (reason: %s)", dl.Subject, req.RunID, dl.Reason)
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
	d.mu.Lock()
	rs := d.active[dl.Ref.RunID]
	d.mu.Unlock()
	var p *dispatch.Plan
	if rs != nil {
		p = rs.plan
	} else if p, err = d.plan(ctx, st.Spec); err != nil {
		return schemas.EpisodeRequest{}, false
	}
	i, ok := p.Lookup(dl.Ref.EpisodeID)
	if !ok {
		return schemas.EpisodeRequest{}, false
	}
	return p.Request(i, time.Now().UTC()), true
}
