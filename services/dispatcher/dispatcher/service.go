package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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
	// MaxInFlightTotal bounds the episodes in flight across the runs this
	// dispatcher drives, shared max-min fairly among them (0:
	// dispatch.DefaultMaxInFlightTotal; -1: no bound beyond each run's
	// max_in_flight).
	MaxInFlightTotal int
	// Reconcile is how often the dispatcher looks for episodes lost in the
	// pipeline (dispatch.Reconcile; default DefaultReconcile).
	Reconcile time.Duration

	envErr error // a malformed environment fallback (RegisterFlags)
}

// DefaultReconcile is Config.Reconcile's default.
const DefaultReconcile = time.Minute

// Run serves until ctx is done.
func Run(ctx context.Context, conn *bus.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	if cfg.Tick == 0 {
		cfg.Tick = 500 * time.Millisecond
	}
	if cfg.MaxEpisodes <= 0 {
		cfg.MaxEpisodes = dispatch.DefaultMaxEpisodes
	}
	if cfg.Reconcile == 0 {
		cfg.Reconcile = DefaultReconcile
	}
	runs, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	done, err := bus.OpenBucket[[]byte](ctx, conn, schemas.BucketCompletions)
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "medgym_dispatcher_scores_refused_total",
		Help: "Scores the dispatcher did not count, by reason (unknown run, unplanned episode, duplicate, ...)."}, []string{"reason"})
	lost := prometheus.NewCounter(prometheus.CounterOpts{Name: "medgym_dispatcher_episodes_lost_total",
		Help: "Episodes the reconciliation found lost in the pipeline (published, unscored, no message in play) and recorded as infra_failure."})
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{refused, lost} {
			if err := cfg.Metrics.Registry.Register(c); err != nil {
				return fmt.Errorf("dispatcher: metrics: %w", err)
			}
		}
	}
	d := dispatch.New(ctx, dispatch.Deps{
		Runs:     runStore{runs},
		Episodes: episodeStore{done},
		Publish:  conn.Publish,
		Purge: func(ctx context.Context, run string) error {
			return conn.Purge(ctx, schemas.StreamEpisodes, schemas.EpisodeRequested.For(run))
		},
		Load: func(ctx context.Context, spec schemas.RunSpec, ds string) ([]tasks.Task, error) {
			return tasks.Load(ctx, tasks.Source{Dataset: ds, Split: spec.Split, DataRoot: cfg.DataRoot, TasksDir: spec.TasksDir, LibraryDir: cfg.LibraryDir})
		},
		Refused:  func(reason string) { refused.WithLabelValues(reason).Inc() },
		Pipeline: pipeline{conn},
		Lost:     lost.Inc,
		Log:      log,
	}, dispatch.Config{Tick: cfg.Tick, MaxEpisodes: cfg.MaxEpisodes, MaxInFlightTotal: cfg.MaxInFlightTotal})
	defer d.Wait()

	// Wake a run's loop on every score (core subscription: every dispatcher
	// hears it). A wake-up only makes the loop re-count from the
	// completions bucket, so a forged one changes nothing.
	stopWake, err := bus.Broadcast(conn, schemas.EpisodeScored.Wildcard(), func(sc schemas.Score) { d.Wake(sc.RunID) })
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	defer stopWake()

	stopAdv, err := bus.WatchMaxDeliveries(ctx, conn, log)
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	defer stopAdv()

	if err := d.Resume(ctx); err != nil {
		return err
	}
	// Lost episodes are found from stored state, at start and then
	// periodically (see dispatch.Reconcile).
	rctx, stopReconcile := context.WithCancel(ctx)
	reconciled := make(chan struct{})
	go func() { defer close(reconciled); d.ReconcileLoop(rctx, cfg.Reconcile) }()
	defer func() { stopReconcile(); <-reconciled }()
	rt, err := bus.NewRouter(conn, log)
	if err != nil {
		return err
	}
	rt.Metrics = cfg.Metrics
	if err := bus.Handle(rt, "dispatcher-runs", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamRuns, Durable: schemas.DurableDispatcherRuns, Subject: schemas.RunSubmitted}},
		d.Submit); err != nil {
		return err
	}
	if err := bus.Handle(rt, "dispatcher-scores", bus.HandlerOptions{Concurrency: 4, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: schemas.DurableDispatcherScores, Subject: schemas.EpisodeScored, MaxDeliver: -1}},
		func(ctx context.Context, sc schemas.Score) error {
			subject := ""
			if m, ok := bus.Delivery(ctx); ok {
				subject = m.Subject()
			}
			return d.Scored(ctx, sc, subject)
		}); err != nil {
		return err
	}
	if err := bus.Handle(rt, "dispatcher-deadletters", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamDeadLetter, Durable: schemas.DurableDispatcherDead, Subject: schemas.DeadLetter}},
		func(ctx context.Context, dl dispatch.DeadLetter) error {
			md := bus.Metadata(ctx)
			dl.Subject, dl.Reason = md[bus.HeaderDeadSubject], md[bus.HeaderDeadReason]
			if m, ok := bus.Delivery(ctx); ok && !bus.PoisonFrom(m.Subject(), dl.Subject) {
				// A service's poison copy naming another stage's message:
				// its user may publish this subject, not fail that episode.
				return bus.Junkf(bus.JunkDeadLetter, "poison copy on %s names %s, not a message of that stream", m.Subject(), dl.Subject)
			}
			return deadLetterJunk(d.DeadLetter(ctx, dl))
		}); err != nil {
		return err
	}
	log.Info("dispatcher running", "max_episodes", cfg.MaxEpisodes)
	return rt.Run(ctx)
}

// deadLetterJunk turns the dead letters the dispatcher cannot account for
// into junk (acked, counted by reason).
func deadLetterJunk(err error) error {
	switch {
	case errors.Is(err, dispatch.ErrDeadScore):
		return bus.Junkf(bus.JunkDeadLetter, "%v", err)
	case errors.Is(err, dispatch.ErrUnknownEpisode):
		return bus.Junkf(bus.JunkUnknownEpisode, "%v", err)
	case errors.Is(err, dispatch.ErrUnknownRun):
		return bus.Junkf(bus.JunkUnknownRun, "%v", err)
	}
	return err
}

// storeErr maps the bus's key-value errors to the domain's.
func storeErr(err error) error {
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return fmt.Errorf("%w: %w", dispatch.ErrNotFound, err)
	case errors.Is(err, bus.ErrConflict):
		return fmt.Errorf("%w: %w", dispatch.ErrConflict, err)
	}
	return err
}

// pipeline is dispatch.Pipeline on the streams and their consumers.
type pipeline struct{ conn *bus.Conn }

func (p pipeline) EpisodesInPlay(ctx context.Context, run string) (map[string]bool, error) {
	ids, err := p.conn.EpisodesInPlay(ctx, run)
	if errors.Is(err, bus.ErrInconclusive) {
		return nil, fmt.Errorf("%w: %w", dispatch.ErrInconclusive, err)
	}
	return ids, err
}

// runStore is dispatch.RunStore on the runs bucket.
type runStore struct {
	b *bus.Bucket[schemas.RunStatus]
}

func (s runStore) Runs(ctx context.Context) ([]string, error) { return s.b.Keys(ctx) }

func (s runStore) Get(ctx context.Context, runID string) (schemas.RunStatus, uint64, error) {
	st, rev, err := s.b.Get(ctx, runID)
	return st, rev, storeErr(err)
}

func (s runStore) Create(ctx context.Context, st schemas.RunStatus) (uint64, error) {
	rev, err := s.b.Create(ctx, st.Spec.RunID, st)
	return rev, storeErr(err)
}

func (s runStore) Update(ctx context.Context, st schemas.RunStatus, rev uint64) (uint64, error) {
	rev, err := s.b.Update(ctx, st.Spec.RunID, st, rev)
	return rev, storeErr(err)
}

// episodeStore is dispatch.EpisodeStore on the completions bucket.
type episodeStore struct{ b *bus.Bucket[[]byte] }

func (s episodeStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	v, rev, err := s.b.Get(ctx, key)
	return v, rev, storeErr(err)
}

func (s episodeStore) Create(ctx context.Context, key string, chunk []byte) (uint64, error) {
	rev, err := s.b.Create(ctx, key, chunk)
	return rev, storeErr(err)
}

func (s episodeStore) Update(ctx context.Context, key string, chunk []byte, rev uint64) (uint64, error) {
	rev, err := s.b.Update(ctx, key, chunk, rev)
	return rev, storeErr(err)
}
