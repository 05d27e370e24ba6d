package sandboxworker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
)

// Config of the sandbox-worker.
type Config struct {
	// Metrics, when set, measures the handlers (see bus.Metrics).
	Metrics *bus.Metrics
	Sandbox sandbox.Config
	// Concurrency is the number of actions this process runs at once.
	Concurrency int
	// Worker names this process in observations.
	Worker  string
	AckWait time.Duration
}

// Run serves until ctx is done.
func Run(ctx context.Context, conn *bus.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("sandbox-worker: %w", err)
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 2
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 60 * time.Second
	}
	sb, err := sandbox.New(ctx, cfg.Sandbox, log)
	if err != nil {
		return fmt.Errorf("sandbox-worker: %w", err)
	}
	defer func() {
		if err := sb.Close(); err != nil {
			log.Warn("close sandbox", "err", err)
		}
	}()
	st := sb.Stats()
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Registry.Register(newSandboxCollector(sb)); err != nil {
			return fmt.Errorf("sandbox-worker: metrics: %w", err)
		}
	}
	// Sandboxes left by an earlier process of this worker have no live
	// episode here: remove them before taking work.
	if n, err := sb.Reap(func(string) bool { return false }); err != nil {
		log.Warn("reap at start", "err", err)
	} else if n > 0 {
		log.Info("reaped sandboxes left from an earlier run", "count", n)
	}
	// Episodes end on any worker; every sandbox worker hears it (core NATS
	// subscription, not a shared durable) and releases its workspace.
	stopRelease, err := bus.Broadcast(conn, schemas.EpisodeCompleted.Wildcard(), func(res schemas.EpisodeResult) {
		if err := sb.Release(res.Request.EpisodeID); err != nil {
			log.Warn("release sandbox", "episode", res.Request.EpisodeID, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("sandbox-worker: completed episodes: %w", err)
	}
	defer stopRelease()

	runs, err := bus.NewRuns(ctx, conn)
	if err != nil {
		return fmt.Errorf("sandbox-worker: %w", err)
	}
	rt, err := bus.NewRouter(conn, log)
	if err != nil {
		return err
	}
	rt.Metrics = cfg.Metrics
	h := func(ctx context.Context, req schemas.ActionRequest) error {
		if err := runs.Admit(ctx, schemas.ClaimOfRef(req.Ref)); err != nil {
			return err // never executed
		}
		res, err := sb.Execute(ctx, req)
		if err != nil {
			return fmt.Errorf("execute %s turn %d: %w", req.Ref.EpisodeID, req.Ref.Turn, err)
		}
		obs := schemas.Observation{Ref: req.Ref, Action: req.Action.Name, Result: res,
			CheckWanted: req.Check, VerifierMode: req.VerifierMode, LabelSets: req.LabelSets, Worker: cfg.Worker}
		return conn.Publish(ctx, schemas.ObservationProduced.For(req.Ref.RunID),
			schemas.MsgID(req.Ref.EpisodeID, req.Ref.Turn, "obs"), obs)
	}
	if err := bus.Handle(rt, "sandbox-actions", bus.HandlerOptions{Concurrency: cfg.Concurrency,
		ConsumerOptions: bus.ConsumerOptions{Stream: schemas.StreamActions, Durable: schemas.DurableSandboxActions,
			Subject: schemas.ActionRequested, AckWait: cfg.AckWait}}, h); err != nil {
		return err
	}
	log.Info("sandbox-worker running", "worker", cfg.Worker, "backend", st.Backend, "limits", st.Limits,
		"seccomp", st.Seccomp, "concurrency", cfg.Concurrency)
	return rt.Run(ctx)
}
