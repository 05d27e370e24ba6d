package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/internal/episode"
	"github.com/medgym/medgym/services/llm-worker/internal/policy"
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
	Debugger DebuggerConfig
	// AckWait for the consumers (in-progress acks keep long steps alive).
	AckWait time.Duration
}

// Run serves until ctx is done.
func Run(ctx context.Context, conn *bus.Conn, cfg Config, log *slog.Logger) error {
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 16
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 60 * time.Second
	}
	// Episode state over the server's max payload is offloaded to the
	// blob store (bus.StateKV), so no output size can fail a save.
	kv, err := conn.StateKV(ctx, schemas.BucketEpisodes)
	if err != nil {
		return fmt.Errorf("llm-worker: episode state bucket: %w", err)
	}
	lib := tasks.NewCache(cfg.DataRoot, cfg.TasksDir, cfg.LibraryDir)
	pool := &policy.OpenAIPool{Defaults: cfg.LLM}
	eng := &episode.Engine{
		Worker:       cfg.Worker,
		SystemAsUser: cfg.SystemAsUser,
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
	w := &worker{conn: conn, kv: kv, runs: runs, eng: eng, log: log}
	rt, err := bus.NewRouter(conn, log)
	if err != nil {
		return err
	}
	rt.Metrics = cfg.Metrics
	opt := func(stream, durable string, subj schemas.Subject) bus.HandlerOptions {
		return bus.HandlerOptions{Concurrency: cfg.Concurrency, ConsumerOptions: bus.ConsumerOptions{
			Stream: stream, Durable: durable, Subject: subj, AckWait: cfg.AckWait}}
	}
	if err := bus.Handle(rt, "llm-episodes", opt(schemas.StreamEpisodes, schemas.DurableLLMEpisodes, schemas.EpisodeRequested), w.start); err != nil {
		return err
	}
	if err := bus.Handle(rt, "llm-checks", opt(schemas.StreamChecks, schemas.DurableLLMChecks, schemas.ObservationChecked), w.observe); err != nil {
		return err
	}
	log.Info("llm-worker running", "worker", cfg.Worker, "concurrency", cfg.Concurrency)
	return rt.Run(ctx)
}

type worker struct {
	conn *bus.Conn
	kv   *bus.StateKV
	runs *bus.Runs
	eng  *episode.Engine
	log  *slog.Logger
}

func (w *worker) start(ctx context.Context, req schemas.EpisodeRequest) error {
	if err := w.runs.Admit(ctx, schemas.ClaimOf(req)); err != nil {
		return err
	}
	if st, _, err := w.load(ctx, req.EpisodeID); err == nil {
		// Redelivered request: the episode already began; re-publish what is pending.
		return w.publish(ctx, st, episode.Step{Action: st.PendingAction, Result: st.Result})
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	st, step, err := w.eng.Start(ctx, req)
	if err != nil {
		return err
	}
	if err := w.save(ctx, st, 0, true); err != nil {
		return err
	}
	return w.publish(ctx, st, step)
}

func (w *worker) observe(ctx context.Context, obs schemas.Observation) error {
	if err := w.runs.Admit(ctx, schemas.ClaimOfRef(obs.Ref)); err != nil {
		return err
	}
	st, rev, err := w.load(ctx, obs.Ref.EpisodeID)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return bus.Junkf(bus.JunkUnknownEpisode, "observation for episode %s, which no worker started", obs.Ref.EpisodeID)
		}
		return err
	}
	next, step, err := w.eng.Continue(ctx, st, obs)
	if errors.Is(err, episode.ErrStale) {
		return w.publish(ctx, st, episode.Step{Action: st.PendingAction, Result: st.Result})
	}
	if err != nil {
		return err
	}
	if err := w.save(ctx, next, rev, false); err != nil {
		return err
	}
	return w.publish(ctx, next, step)
}

func (w *worker) load(ctx context.Context, id string) (schemas.EpisodeState, uint64, error) {
	v, rev, err := w.kv.Get(ctx, id)
	if err != nil {
		return schemas.EpisodeState{}, 0, fmt.Errorf("load episode %s: %w", id, err)
	}
	var st schemas.EpisodeState
	if err := json.Unmarshal(v, &st); err != nil {
		return st, 0, bus.Permanent(fmt.Errorf("decode episode state %s: %w", id, err))
	}
	return st, rev, nil
}

// save stores st: create for a new episode, compare-and-set otherwise, so
// two workers racing on one episode cannot both win.
func (w *worker) save(ctx context.Context, st schemas.EpisodeState, rev uint64, create bool) error {
	b, err := json.Marshal(st)
	if err != nil {
		return bus.Permanent(fmt.Errorf("encode episode state: %w", err))
	}
	if create {
		_, err = w.kv.Create(ctx, st.Request.EpisodeID, b)
	} else {
		_, err = w.kv.Update(ctx, st.Request.EpisodeID, b, rev)
	}
	if err != nil {
		return fmt.Errorf("save episode %s (turn %d): %w", st.Request.EpisodeID, len(st.Turns), err)
	}
	return nil
}

func (w *worker) publish(ctx context.Context, st schemas.EpisodeState, step episode.Step) error {
	run := st.Request.RunID
	switch {
	case step.Action != nil:
		return w.conn.Publish(ctx, schemas.ActionRequested.For(run),
			schemas.MsgID(step.Action.Ref.EpisodeID, step.Action.Ref.Turn, "action"), *step.Action)
	case step.Result != nil:
		return w.conn.Publish(ctx, schemas.EpisodeCompleted.For(run),
			schemas.MsgID(step.Result.Request.EpisodeID, "result"), *step.Result)
	}
	return nil
}

// ClientDefaults configures OpenAI-compatible clients (re-exported for the
// operator CLI).
type ClientDefaults = policy.ClientDefaults

// DebuggerConfig configures the debug action's model (re-exported for the
// operator CLI).
type DebuggerConfig = policy.DebuggerConfig

// HTTPClient returns a client trusting the system's CAs plus those in
// caFile (nil for an empty caFile), as the worker's model clients do
// (re-exported for the operator CLI's endpoint check).
func HTTPClient(caFile string) (*http.Client, error) { return policy.HTTPClient(caFile) }
