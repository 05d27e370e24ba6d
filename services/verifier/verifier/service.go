package verifier

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// Run serves until ctx is done.
func Run(ctx context.Context, conn *bus.Conn, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 32
	}
	if cfg.BatchAge == 0 {
		cfg.BatchAge = time.Second
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 60 * time.Second
	}
	if cfg.StoreGiveUp == 0 {
		cfg.StoreGiveUp = DefaultStoreGiveUp
	}
	st, err := store.Open(ctx, cfg.Store, cfg.StoreOptions)
	if err != nil {
		return fmt.Errorf("verifier: %w", err)
	}
	// A store that cannot take rows would make every episode retry its
	// write forever: refuse to start instead, saying why.
	if err := st.CheckWritable(ctx); err != nil {
		return fmt.Errorf("verifier: %w", err)
	}
	// Every verifier writing to the store decides through the same claims
	// which file holds an episode, so none stores one twice (ADR 0027).
	cl, err := openClaims(ctx, conn)
	if err != nil {
		return fmt.Errorf("verifier: %w", err)
	}
	st.WithClaims(cl)
	batch := store.NewBatcher(st, cfg.Concurrency, cfg.BatchAge, log).WithIdle(cfg.BatchIdle)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := batch.Close(cctx); err != nil {
			log.Warn("close batcher", "err", err)
		}
	}()
	var scored *prometheus.CounterVec
	if cfg.Metrics != nil {
		scored = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "medgym_episodes_scored_total",
			Help: "Episodes scored and stored, by dataset and outcome."}, []string{"dataset", "outcome"})
		if err := cfg.Metrics.Registry.Register(scored); err != nil {
			return fmt.Errorf("verifier: metrics: %w", err)
		}
	}
	hashes, err := treeHashes(cfg)
	if err != nil {
		return fmt.Errorf("verifier: %w", err)
	}
	runs, err := bus.NewRuns(ctx, conn)
	if err != nil {
		return fmt.Errorf("verifier: %w", err)
	}
	v := &verifier{failingSince: map[string]time.Time{}, runs: runs, store: st.Location(), scored: scored, conn: conn, lib: tasks.NewCache(cfg.DataRoot, cfg.TasksDir, cfg.LibraryDir), batch: batch, cfg: cfg, log: log,
		hashes: hashes}

	rt, err := bus.NewRouter(conn, log)
	if err != nil {
		return err
	}
	rt.Metrics = cfg.Metrics
	if err := bus.Handle(rt, "verifier-observations", bus.HandlerOptions{Concurrency: 8,
		ConsumerOptions: bus.ConsumerOptions{Stream: schemas.StreamObservations, Durable: schemas.DurableVerifierObs,
			Subject: schemas.ObservationProduced, AckWait: cfg.AckWait}}, v.check); err != nil {
		return err
	}
	if err := bus.Handle(rt, "verifier-results", bus.HandlerOptions{Concurrency: cfg.Concurrency,
		ConsumerOptions: bus.ConsumerOptions{Stream: schemas.StreamResults, Durable: schemas.DurableVerifierResults,
			Subject: schemas.EpisodeCompleted, AckWait: cfg.AckWait, MaxDeliver: -1}}, v.score); err != nil {
		return err
	}
	log.Info("verifier running", "store", st.String(), "agent_tree", hashes.Agent, "verifier_tree", hashes.Verifier, "strict", verify.VersionFor(verify.Strict), "upstream", verify.VersionFor(verify.Upstream))
	return rt.Run(ctx)
}

// DefaultStoreGiveUp is Config.StoreGiveUp's default.
const DefaultStoreGiveUp = 5 * time.Minute

type verifier struct {
	// failingSince is, per run, when the store began refusing the run's
	// rows (since the last one it took).
	failingMu    sync.Mutex
	failingSince map[string]time.Time
	runs         *bus.Runs
	store        string // where rows go, announced in every score
	// hashes are the task trees' hashes, recorded in every row.
	hashes schemas.TreeHashes
	scored *prometheus.CounterVec
	conn   *bus.Conn
	lib    *tasks.Cache
	batch  *store.Batcher
	cfg    Config
	log    *slog.Logger
}

// check adds the verdict to a code execution that asked for one and passes
// the observation on.
func (v *verifier) check(ctx context.Context, obs schemas.Observation) error {
	if err := v.runs.Admit(ctx, schemas.ClaimOfRef(obs.Ref)); err != nil {
		return err
	}
	if obs.CheckWanted && obs.Action == schemas.ActionValidateCode {
		mode, err := verify.ParseMode(obs.VerifierMode)
		if err != nil {
			return bus.Permanent(err)
		}
		truth, err := v.lib.TruthFor(ctx, obs.Ref.Dataset, obs.Ref.Split, obs.Ref.TaskID, mode == verify.Upstream, obs.LabelSets)
		if err != nil {
			return bus.Permanent(fmt.Errorf("check %s turn %d: %w", obs.Ref.EpisodeID, obs.Ref.Turn, err))
		}
		// Only the agent-safe verdict travels on: the detailed one can
		// quote the gold value and stays in this process's log.
		c, detail := verify.CheckOutputDetail(mode, obs.Ref.Dataset, truth, obs.Result)
		v.log.Debug("check", "episode", obs.Ref.EpisodeID, "turn", obs.Ref.Turn, "accepted", c.Accepted, "verdict", detail)
		obs.Check = &c
	}
	return v.conn.Publish(ctx, schemas.ObservationChecked.For(obs.Ref.RunID),
		schemas.MsgID(obs.Ref.EpisodeID, obs.Ref.Turn, "checked"), obs)
}

// score scores a finished episode, stores it, and publishes the score.
func (v *verifier) score(ctx context.Context, res schemas.EpisodeResult) error {
	req := res.Request
	if err := v.runs.Admit(ctx, schemas.ClaimOf(req)); err != nil {
		return err // never scored, never stored
	}
	mode, err := verify.ParseMode(req.Options.VerifierMode)
	if err != nil {
		mode = verify.Strict
		res.Error = joinErr(res.Error, err.Error())
	}
	sc := schemas.Score{
		RunID: req.RunID, EpisodeID: req.EpisodeID, TaskID: req.Task.ID, Dataset: req.Task.Dataset,
		Category: req.Task.Category, SampleIndex: req.SampleIndex, PolicyVersion: req.Policy.Version,
		NumTurns: len(res.Turns), VerifierVersion: verify.VersionFor(mode), ScoredAt: time.Now().UTC(),
		Store: v.store,
	}
	truth, err := v.lib.TruthFor(ctx, req.Task.Dataset, req.Task.Split, req.Task.ID, mode == verify.Upstream, req.Options.LabelSets)
	if err != nil {
		sc.Outcome = schemas.OutcomeInfraFailure
		res.Error = joinErr(res.Error, "ground truth: "+err.Error())
	} else {
		sc.LabelSet = truth.LabelSet
		var verdict string
		sc.Outcome, sc.Reward, verdict = verify.Score(v.cfg.Scoring.Options(mode), truth, res)
		if sc.Outcome != schemas.OutcomeCorrect && verdict != "" {
			res.Error = joinErr(res.Error, verdict)
		}
	}
	row := parquet.FromEpisode(res, sc, string(mode), v.hashes)
	done := make(chan error, 1)
	v.batch.Add(row, func(err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			return v.storeFailed(req.RunID, fmt.Errorf("store episode %s: %w", req.EpisodeID, err))
		}
		v.storeTook(req.RunID)
	case <-ctx.Done():
		return ctx.Err()
	}
	if v.scored != nil {
		v.scored.WithLabelValues(sc.Dataset, string(sc.Outcome)).Inc()
	}
	return v.conn.Publish(ctx, schemas.EpisodeScored.For(req.RunID), schemas.MsgID(req.EpisodeID, "scored"), sc)
}

// storeFailed returns err, which JetStream redelivers with backoff, until
// the store has refused every row of the run for StoreGiveUp: then the
// episode is a permanent failure, dead-lettered with err, and the
// dispatcher fails its run with that reason (a store that stays
// unwritable would otherwise retry the run's episodes forever). The clock
// is per run, so other runs' rows going through do not hide it.
func (v *verifier) storeFailed(run string, err error) error {
	now := time.Now()
	v.failingMu.Lock()
	since, ok := v.failingSince[run]
	if !ok {
		since = now
		v.failingSince[run] = now
	}
	v.failingMu.Unlock()
	if failing := now.Sub(since); failing >= v.cfg.StoreGiveUp {
		return bus.Permanent(fmt.Errorf("%w (the store has refused every row of run %s for %s: giving up)", err, run, failing.Round(time.Second)))
	}
	return err
}

// storeTook resets the run's give-up clock.
func (v *verifier) storeTook(run string) {
	v.failingMu.Lock()
	delete(v.failingSince, run)
	v.failingMu.Unlock()
}

// treeHashes are the hashes of the task trees this verifier scores with:
// an upstream folder's (its task files and the rest, hashed here) or the
// library's manifests.
func treeHashes(cfg Config) (schemas.TreeHashes, error) {
	if cfg.TasksDir != "" {
		return tasks.UpstreamHashes(cfg.TasksDir)
	}
	if cfg.LibraryDir == "" {
		return schemas.TreeHashes{}, nil
	}
	return tasks.LibraryHashes(cfg.LibraryDir)
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
