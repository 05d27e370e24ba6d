package env

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/internal/catalog"
	"github.com/medgym/medgym/services/env/internal/httpapi"
	"github.com/medgym/medgym/services/env/internal/session"
)

// Run serves the API until ctx is done.
func Run(ctx context.Context, conn *bus.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 16
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 60 * time.Second
	}
	if cfg.ReapEvery == 0 {
		cfg.ReapEvery = 30 * time.Second
	}
	if cfg.StepWait == 0 {
		cfg.StepWait = 10 * time.Minute
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	cat, err := catalog.Open(cfg.Views)
	if err != nil {
		return fmt.Errorf("env: %w", err)
	}
	st, err := openStore(ctx, conn)
	if err != nil {
		return fmt.Errorf("env: %w", err)
	}
	runs, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		return fmt.Errorf("env: %w", err)
	}
	if cfg.Run == "" {
		if cfg.Run, err = defaultRun(ctx, runs, cfg.InStore, time.Now().UTC()); err != nil {
			return fmt.Errorf("env: %w", err)
		}
	}
	svc := session.New(session.Deps{
		Store: st, Catalog: cat, Publish: conn.Publish, Register: registerRun(runs, cfg.InStore), Log: log,
		Worker: cfg.Worker, DefaultRun: cfg.Run, DefaultModel: cfg.Model, DefaultEndOn: cfg.EndOn, SystemAsUser: cfg.SystemAsUser,
	}, session.Limits{MaxSessions: cfg.MaxSessions, IdleTimeout: cfg.Idle, KeepDone: cfg.KeepDone, StepWait: cfg.StepWait})
	if err := svc.Load(ctx); err != nil {
		return fmt.Errorf("env: %w", err)
	}
	rt, err := bus.NewRouter(conn, log)
	if err != nil {
		return err
	}
	rt.Metrics = cfg.Metrics
	opt := func(stream, durable string, subj schemas.Subject) bus.HandlerOptions {
		return bus.HandlerOptions{Concurrency: cfg.Concurrency, ConsumerOptions: bus.ConsumerOptions{
			Stream: stream, Durable: durable, Subject: subj, AckWait: cfg.AckWait}}
	}
	junk := func(err error) error {
		if errors.Is(err, session.ErrUnknownEpisode) {
			return bus.Junk(bus.JunkUnknownEpisode, err)
		}
		return err
	}
	if err := bus.Handle(rt, "env-checks", opt(schemas.StreamChecks, schemas.DurableEnvChecks, schemas.ObservationChecked),
		func(ctx context.Context, obs schemas.Observation) error { return junk(svc.Observe(ctx, obs)) }); err != nil {
		return err
	}
	if err := bus.Handle(rt, "env-scores", opt(schemas.StreamScores, schemas.DurableEnvScores, schemas.EpisodeScored),
		func(ctx context.Context, sc schemas.Score) error { return junk(svc.Scored(ctx, sc)) }); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.addr())
	if err != nil {
		return fmt.Errorf("env: listen %s: %w", cfg.addr(), err)
	}
	ln, maxConns := limitListener(ln, cfg.MaxConns, log)
	srv := newHTTPServer(ctx, httpapi.Handler(svc, cat, httpapi.Options{Token: cfg.Token, MaxBody: cfg.MaxBody, Log: log,
		LongWait: cfg.StepWait + writeSlack, SocketIdle: cfg.Idle, MaxMCPSessions: cfg.MaxSessions, OpenEnvRoot: cfg.OpenEnvRoot}), cfg.ReadTimeout)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("env: serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	})
	g.Go(func() error {
		t := time.NewTicker(cfg.ReapEvery)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
				if _, err := svc.Reap(gctx); err != nil && gctx.Err() == nil {
					log.Warn("reap sessions", "err", err)
				}
			}
		}
	})
	g.Go(func() error { return rt.Run(gctx) })
	log.Info("environment server running", "addr", ln.Addr().String(), "datasets", cat.Datasets(), "run", cfg.Run, "max_conns", maxConns)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr().String())
	}
	return g.Wait()
}

// registerRun records an environment run in the run-status bucket (once).
// A run id the bucket knows as another kind of run, or one it does not
// know but the trajectory store holds (inStore), is refused: its sessions
// would add rows to that run, and a colliding episode id would keep the
// old row in silence.
func registerRun(runs *bus.Bucket[schemas.RunStatus], inStore func(context.Context, string) (bool, error)) session.RunRegistry {
	return func(ctx context.Context, spec schemas.RunSpec) error {
		for {
			st, _, err := runs.Get(ctx, spec.RunID)
			switch {
			case err == nil:
				if !envRun(st) {
					return fmt.Errorf("%w: run_id %s names a run submitted by medgym run or the trainer; choose another", session.ErrRunExists, spec.RunID)
				}
				return nil
			case !errors.Is(err, bus.ErrNotFound):
				return err
			}
			if inStore != nil {
				has, err := inStore(ctx, spec.RunID)
				if err != nil {
					return fmt.Errorf("look up run %s in the trajectory store: %w", spec.RunID, err)
				}
				if has {
					return fmt.Errorf("%w: run_id %s already has episodes in the trajectory store that this server did not play (an evaluation run, or another server's); choose another", session.ErrRunExists, spec.RunID)
				}
			}
			_, err = runs.Create(ctx, spec.RunID, schemas.RunStatus{Spec: spec, Finished: true, UpdatedAt: time.Now().UTC()})
			if !errors.Is(err, bus.ErrConflict) {
				return err
			}
			// Created meanwhile: look again.
		}
	}
}

// envRun reports whether a run record is an environment run's.
func envRun(st schemas.RunStatus) bool {
	return st.Spec.Samples == session.MaxSamples && st.Finished
}

// defaultRun is the run of sessions that name none: env-<UTC date>, or,
// when the store holds a run of that name this state does not know (a
// fresh state folder over the same store), env-<date>-<time>[-n].
func defaultRun(ctx context.Context, runs *bus.Bucket[schemas.RunStatus], inStore func(context.Context, string) (bool, error), now time.Time) (string, error) {
	base := "env-" + now.Format("20060102")
	if inStore == nil {
		return base, nil
	}
	for i, id := 0, base; i < 100; i++ {
		st, _, err := runs.Get(ctx, id)
		switch {
		case err == nil && envRun(st):
			return id, nil
		case err != nil && !errors.Is(err, bus.ErrNotFound):
			return "", fmt.Errorf("default run: %w", err)
		case err != nil:
			has, err := inStore(ctx, id)
			if err != nil {
				return "", fmt.Errorf("default run: look up %s in the trajectory store: %w", id, err)
			}
			if !has {
				return id, nil
			}
		}
		id = base + "-" + now.Format("150405")
		if i > 0 {
			id += fmt.Sprintf("-%d", i+1)
		}
	}
	return "", fmt.Errorf("default run: env-%s and 99 variants are taken; pass --run", now.Format("20060102"))
}
