package llmworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/internal/worker"
	"github.com/medgym/medgym/services/llm-worker/policy"
	"github.com/medgym/medgym/tasks"
)

// Config of the llm-worker.
type Config struct {
	// Metrics, when set, measures the handlers (see bus.Metrics).
	Metrics *bus.Metrics
	// DataRoot and TasksDir locate reference solutions (reference policy).
	DataRoot   string
	TasksDir   string
	LibraryDir string
	// Concurrency is the number of episode steps this process runs at once.
	Concurrency int
	// Worker names this process in trajectories.
	Worker string
	// SystemAsUser folds the system prompt into the first user message.
	SystemAsUser bool
	// LLM are the defaults for OpenAI-compatible clients.
	LLM policy.ClientDefaults
	// Debugger configures the model behind the debug action; its zero value
	// uses each episode's own endpoint and model.
	Debugger policy.DebuggerConfig
	// AckWait for the consumers (in-progress acks keep long steps alive).
	AckWait time.Duration
	// EpisodeClock bounds an episode whose options set no timeout (0: no
	// bound); it also bounds how long its model calls wait out an endpoint
	// that is down.
	EpisodeClock time.Duration
}

// Run serves until ctx is done.
func Run(ctx context.Context, conn *bus.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("llm-worker: %w", err)
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 16
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 60 * time.Second
	}
	// Episode state over the server's max payload is offloaded to the
	// blob store (bus.OpenStateBucket), so no output size can fail a save.
	states, err := bus.OpenStateBucket[schemas.EpisodeState](ctx, conn, schemas.BucketEpisodes)
	if err != nil {
		return fmt.Errorf("llm-worker: episode state bucket: %w", err)
	}
	lib := tasks.NewCache(cfg.DataRoot, cfg.TasksDir, cfg.LibraryDir)
	// A model endpoint that is down is waited out, bounded by each
	// episode's clock, not turned into infra_failure (docs/adr/0024).
	cfg.LLM.WaitOutage, cfg.LLM.Logger = true, log
	pool := &policy.OpenAIPool{Defaults: cfg.LLM}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Registry.Register(newEndpointCollector(pool)); err != nil {
			return fmt.Errorf("llm-worker: metrics: %w", err)
		}
	}
	eng := &episode.Engine{
		Worker:         cfg.Worker,
		SystemAsUser:   cfg.SystemAsUser,
		DefaultTimeout: cfg.EpisodeClock,
		Policy: func(spec schemas.PolicySpec) (episode.Policy, error) {
			switch spec.Name {
			case schemas.PolicyReference:
				return policy.Reference{Solutions: lib}, nil
			case schemas.PolicyOpenAI:
				return pool.Policy(spec)
			}
			return nil, fmt.Errorf("unknown policy %q", spec.Name)
		},
	}
	if !cfg.Debugger.Off {
		eng.Debugger = policy.Debugger{Config: cfg.Debugger, Pool: pool}
	}
	runs, err := bus.NewRuns(ctx, conn)
	if err != nil {
		return fmt.Errorf("llm-worker: %w", err)
	}
	w := &worker.Worker{States: stateStore{states}, Publish: conn.Publish, Admit: runs.Admit, Dropped: runs.Dropped, Engine: eng}
	rt, err := bus.NewRouter(conn, log)
	if err != nil {
		return err
	}
	rt.Metrics = cfg.Metrics
	opt := func(stream, durable string, subj schemas.Subject) bus.HandlerOptions {
		return bus.HandlerOptions{Concurrency: cfg.Concurrency, ConsumerOptions: bus.ConsumerOptions{
			Stream: stream, Durable: durable, Subject: subj, AckWait: cfg.AckWait}}
	}
	if err := bus.Handle(rt, "llm-episodes", opt(schemas.StreamEpisodes, schemas.DurableLLMEpisodes, schemas.EpisodeRequested),
		func(ctx context.Context, req schemas.EpisodeRequest) error {
			if err := w.Start(ctx, req); errors.Is(err, worker.ErrDropped) {
				return bus.Junk(bus.JunkRunDropped, err)
			} else if err != nil {
				return err
			}
			return nil
		}); err != nil {
		return err
	}
	if err := bus.Handle(rt, "llm-checks", opt(schemas.StreamChecks, schemas.DurableLLMChecks, schemas.ObservationChecked),
		func(ctx context.Context, obs schemas.Observation) error {
			if err := w.Observe(ctx, obs); errors.Is(err, worker.ErrUnknownEpisode) {
				return bus.Junk(bus.JunkUnknownEpisode, err)
			} else if err != nil {
				return err
			}
			return nil
		}); err != nil {
		return err
	}
	log.Info("llm-worker running", "worker", cfg.Worker, "concurrency", cfg.Concurrency)
	return rt.Run(ctx)
}

// stateStore is worker.StateStore on the episode-state bucket (JSON, large
// states offloaded to the blob store).
type stateStore struct {
	b *bus.Bucket[schemas.EpisodeState]
}

// storeErr maps the bus's key-value errors to the worker's.
func storeErr(err error) error {
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return fmt.Errorf("%w: %w", worker.ErrNotFound, err)
	case errors.Is(err, bus.ErrConflict):
		return fmt.Errorf("%w: %w", worker.ErrConflict, err)
	}
	return err
}

func (s stateStore) Get(ctx context.Context, id string) (schemas.EpisodeState, uint64, error) {
	st, rev, err := s.b.Get(ctx, id)
	return st, rev, storeErr(err)
}

func (s stateStore) Create(ctx context.Context, st schemas.EpisodeState) (uint64, error) {
	rev, err := s.b.Create(ctx, st.Request.EpisodeID, st)
	return rev, storeErr(err)
}

func (s stateStore) Update(ctx context.Context, st schemas.EpisodeState, rev uint64) (uint64, error) {
	rev, err := s.b.Update(ctx, st.Request.EpisodeID, st, rev)
	return rev, storeErr(err)
}
