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
	if cfg.Run == "" {
		cfg.Run = "env-" + time.Now().UTC().Format("20060102")
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
	svc := session.New(session.Deps{
		Store: st, Catalog: cat, Publish: conn.Publish, Register: registerRun(runs), Log: log,
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
	srv := &http.Server{
		Handler:           httpapi.Handler(svc, cat, httpapi.Options{Token: cfg.Token, MaxBody: cfg.MaxBody, Log: log}),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
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
	log.Info("environment server running", "addr", ln.Addr().String(), "datasets", cat.Datasets(), "run", cfg.Run)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr().String())
	}
	return g.Wait()
}

// registerRun records an environment run in the run-status bucket (once;
// a run id that names another kind of run is refused).
func registerRun(runs *bus.Bucket[schemas.RunStatus]) session.RunRegistry {
	return func(ctx context.Context, spec schemas.RunSpec) error {
		now := time.Now().UTC()
		_, err := runs.Create(ctx, spec.RunID, schemas.RunStatus{Spec: spec, Finished: true, UpdatedAt: now})
		if !errors.Is(err, bus.ErrConflict) {
			return err
		}
		st, _, err := runs.Get(ctx, spec.RunID)
		if err != nil {
			return err
		}
		if st.Spec.Samples != session.MaxSamples || !st.Finished {
			return fmt.Errorf("%w: run_id %s names a run submitted by medgym run or the trainer; choose another", session.ErrInvalid, spec.RunID)
		}
		return nil
	}
}
