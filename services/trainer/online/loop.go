package online

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/train"
	"github.com/medgym/medgym/services/trainer/worker"
	"github.com/medgym/medgym/store"
)

// Report is one iteration's summary, also written to
// <work_dir>/iter-NNNN/report.json.
type Report struct {
	Iteration    int     `json:"iteration"`
	RunID        string  `json:"run_id"`
	FromVersion  int     `json:"from_version"`
	ToVersion    int     `json:"to_version"`
	Adapter      string  `json:"adapter"`
	Episodes     int     `json:"episodes"`
	MeanReward   float64 `json:"mean_reward"`
	SuccessRate  float64 `json:"success_rate"`
	BatchRows    int     `json:"batch_rows"`
	StaleDropped int     `json:"stale_dropped"`
	Reweighted   int     `json:"reweighted"`
	Groups       int     `json:"groups"`
	Samples      int     `json:"samples"`
	// Time split, in seconds: sampling = submit to the batch's last score;
	// waiting = reading the rows from the store and building the batch;
	// training = the training command; loading = loading the adapter and
	// announcing the version.
	SamplingS float64        `json:"sampling_s"`
	WaitingS  float64        `json:"waiting_s"`
	TrainingS float64        `json:"training_s"`
	LoadingS  float64        `json:"loading_s"`
	Train     map[string]any `json:"train,omitempty"`
	// ModelLoadS is the time spent starting the resident worker (loading
	// the model) during this iteration: at the first iteration and after a
	// crash, else 0. Part of TrainingS.
	ModelLoadS float64 `json:"model_load_s"`
	// WorkerRestarts counts resident workers restarted after a crash.
	WorkerRestarts int `json:"worker_restarts"`
	// GPUIdle is the share of the iteration's wall time the trainer spent
	// outside the training step proper (sampling, waiting, loading, model
	// loads): 1 − (training − model load) / total.
	GPUIdle float64 `json:"gpu_idle"`
	// Overlapped: this iteration's batch was sampled while the previous
	// iteration trained (config overlap), one version behind.
	Overlapped bool `json:"overlapped"`
	// Eval is the held-out evaluation run after this iteration (config
	// eval.every), nil when none ran.
	Eval *EvalResult `json:"eval,omitempty"`
	// EvalS is the time the evaluation took (not part of the split above).
	EvalS float64 `json:"eval_s,omitempty"`
	// Recipe is the sampling and reward recipe of the iteration; the
	// step's own (lr, β, KL, steps) is Train["recipe"].
	Recipe Recipe `json:"recipe"`
}

// EvalResult is a held-out evaluation of one adapter.
type EvalResult struct {
	RunID       string  `json:"run_id"`
	Model       string  `json:"model"`
	Episodes    int     `json:"episodes"`
	Scored      int     `json:"scored"`
	SuccessRate float64 `json:"success_rate"`
}

// Recipe records the settings an iteration ran with.
type Recipe struct {
	Temperature  float64 `json:"temperature"`
	Samples      int     `json:"samples"`
	FormatWeight float64 `json:"format_weight"`
	AdvScale     string  `json:"adv_scale"`
	AdvEps       float64 `json:"adv_eps"`
}

// Loop runs the online iterations.
type Loop struct {
	sup          *worker.Supervisor
	presubmitted string // the run submitted ahead (overlap)
	cfg          Config
	conn         *bus.Conn
	st           *store.Store
	log          *slog.Logger
	out          io.Writer
	httpc        *http.Client
	// baseURL is the serving engine's: serving.base_url, or the resident
	// worker's server.
	baseURL string
}

// New returns a loop over conn and the store; per-iteration lines go to out.
func New(cfg Config, conn *bus.Conn, st *store.Store, out io.Writer, log *slog.Logger) *Loop {
	return &Loop{cfg: cfg.WithDefaults(), conn: conn, st: st, log: log, out: out, httpc: &http.Client{Timeout: 5 * time.Minute},
		baseURL: cfg.Serving.BaseURL}
}

// Run connects to NATS (with opts: TLS, the wait for a server not up yet)
// and the store named in cfg (creating missing streams and buckets with
// streams' replicas and placement) and runs the loop until cfg.Iterations are
// complete or ctx ends.
func Run(ctx context.Context, cfg Config, streams bus.StreamOptions, out io.Writer, log *slog.Logger, opts ...bus.ConnectOption) ([]Report, error) {
	auth, err := bus.AuthFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	conn, err := bus.Connect(ctx, cfg.NATS, "medgym-trainer", log, append([]bus.ConnectOption{bus.WithAuth(auth), bus.WithRole("trainer")}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := bus.PrepareStreams(ctx, conn, streams); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.Store, store.Options{})
	if err != nil {
		return nil, err
	}
	return New(cfg, conn, st, out, log).Run(ctx)
}

// RunID is the run of iteration it.
func (l *Loop) RunID(it int) string { return fmt.Sprintf("%s-it%04d", l.cfg.RunPrefix, it) }

// AdapterName is the serving name of version v.
func (l *Loop) AdapterName(v int) string {
	return fmt.Sprintf("%s-v%d", l.cfg.Serving.AdapterPrefix, v)
}

// Run resumes from the state file and runs the remaining iterations.
func (l *Loop) Run(ctx context.Context) ([]Report, error) {
	if err := os.MkdirAll(l.cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	s, err := LoadState(l.cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	if len(l.cfg.Train.Resident) > 0 {
		l.sup = &worker.Supervisor{Command: l.cfg.Train.Resident, Dir: l.cfg.Train.Dir, Init: s.AdapterPath, Log: l.log}
		if l.cfg.ServesFromWorker() {
			// The worker serves its initial weights (the state's adapter
			// after a restart) under the name the samplers use for them.
			srv, err := serveAt(l.cfg.Serving.Listen, cmp.Or(s.Adapter, l.cfg.Serving.BaseModel))
			if err != nil {
				return nil, err
			}
			l.sup.Serve, l.baseURL = srv, srv.URL()
		}
		defer func() {
			if err := l.sup.Close(); err != nil {
				l.log.Warn("trainer worker shutdown", "err", err)
			}
		}()
	}
	if s.Iteration > 0 {
		l.log.Info("resuming", "iteration", s.Iteration, "version", s.Version, "adapter", s.Adapter)
		if s.Adapter != "" && !l.cfg.ServesFromWorker() { // the engine may have restarted since
			if err := l.loadAdapter(ctx, s.Adapter, s.AdapterPath); err != nil {
				return nil, err
			}
		}
	}
	var reports []Report
	for s.Iteration < l.cfg.Iterations {
		rep, next, err := l.iterate(ctx, s)
		if err != nil {
			return reports, fmt.Errorf("iteration %d: %w", s.Iteration, err)
		}
		if err := saveState(l.cfg.WorkDir, next); err != nil {
			return reports, err
		}
		reports = append(reports, rep)
		s = next
		fmt.Fprintf(l.out, "iter %d v%d→v%d %s: reward %.3f success %.1f%% (%d episodes; batch %d samples in %d groups, %d stale dropped, %d re-weighted) | sampling %.1fs waiting %.1fs training %.1fs loading %.1fs\n",
			rep.Iteration, rep.FromVersion, rep.ToVersion, rep.RunID, rep.MeanReward, 100*rep.SuccessRate, rep.Episodes,
			rep.Samples, rep.Groups, rep.StaleDropped, rep.Reweighted, rep.SamplingS, rep.WaitingS, rep.TrainingS, rep.LoadingS)
		fmt.Fprintf(l.out, "  model load %.1fs, GPU idle %.0f%%%s\n", rep.ModelLoadS, 100*rep.GPUIdle,
			map[bool]string{true: ", sampled while the previous iteration trained", false: ""}[rep.Overlapped])
		if rep.Eval != nil {
			fmt.Fprintf(l.out, "  held-out eval %s (%s): success %.1f%% of %d (%.1fs)\n", rep.Eval.RunID, rep.Eval.Model,
				100*rep.Eval.SuccessRate, rep.Eval.Scored, rep.EvalS)
		}
		if err := WriteProgress(l.cfg.WorkDir); err != nil { // a chart is not worth stopping the training for
			l.log.Warn("progress report", "err", err)
		}
	}
	return reports, nil
}

func (l *Loop) iterate(ctx context.Context, s State) (Report, State, error) {
	c := l.cfg
	it, v := s.Iteration, s.Version
	runID := l.RunID(it)
	dir := filepath.Join(c.WorkDir, fmt.Sprintf("iter-%04d", it))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Report{}, s, fmt.Errorf("iteration dir: %w", err)
	}
	model := c.Serving.BaseModel
	if s.Adapter != "" {
		model = s.Adapter
	}
	rep := Report{Iteration: it, RunID: runID, FromVersion: v, ToVersion: v + 1, Adapter: l.AdapterName(v + 1),
		Recipe: Recipe{Temperature: *c.Temperature, Samples: c.Samples, FormatWeight: *c.GRPO.FormatWeight,
			AdvScale: c.GRPO.Scale, AdvEps: c.GRPO.Eps}}

	// 1. Sample: submit the batch (unless it was submitted ahead, while the
	// previous iteration trained) and follow its scores as they stream in.
	// A resident worker that serves the policy must run first.
	t0 := time.Now()
	var load0 float64
	var restarts0 int
	if l.sup != nil {
		load0, restarts0 = l.sup.LoadS, l.sup.Restarts
		if l.cfg.ServesFromWorker() {
			if _, err := l.sup.Process(ctx); err != nil {
				return rep, s, err
			}
		}
	}
	spec := l.spec(it, model, v)
	if l.presubmitted == runID {
		rep.Overlapped = true
	} else if err := bus.SubmitRun(ctx, l.conn, spec); err != nil {
		return rep, s, err
	}
	scores, err := l.waitScores(ctx, runID)
	if err != nil {
		return rep, s, err
	}
	rep.SamplingS = time.Since(t0).Seconds()
	rep.Episodes = len(scores)
	var ok, scored int
	for _, sc := range scores {
		if train.Infra(string(sc.Outcome)) {
			continue
		}
		scored++
		rep.MeanReward += sc.Reward
		if sc.Outcome.Solved() {
			ok++
		}
	}
	if scored > 0 {
		rep.MeanReward /= float64(scored)
		rep.SuccessRate = float64(ok) / float64(scored)
	}

	// 2. Read the rows (stored before their scores were published) and
	// build the GRPO batch under the staleness bound.
	t1 := time.Now()
	rows, err := l.readRows(ctx, it, len(scores))
	if err != nil {
		return rep, s, err
	}
	kept, weights := l.staleness(rows, v, &rep)
	eps := make([]*train.Episode, len(kept))
	for i := range kept {
		eps[i] = train.NewEpisode(&kept[i], train.ObsSampled)
	}
	recs, gst := train.GRPO(eps, train.GRPOOptions{Eps: c.GRPO.Eps, Scale: c.GRPO.Scale, DropZeroVariance: c.GRPO.DropZeroVariance,
		FormatWeight: *c.GRPO.FormatWeight,
		Weight:       func(r *parquet.Row) float64 { return weights[r.RunID+"/"+r.EpisodeID] }})
	rep.BatchRows, rep.Groups, rep.Samples = len(kept), gst.Groups, gst.Samples
	batch := filepath.Join(dir, "batch.jsonl")
	if _, err := train.WriteJSONL(batch, recs); err != nil {
		return rep, s, err
	}
	rep.WaitingS = time.Since(t1).Seconds()

	// Overlap: the next iteration's batch is sampled from the current
	// policy while this one trains; its rows are one version behind when
	// they are trained on, which the staleness bound (max_lag ≥ 1) admits.
	if c.Overlap && it+1 < c.Iterations {
		next := l.spec(it+1, model, v)
		if err := bus.SubmitRun(ctx, l.conn, next); err != nil {
			return rep, s, err
		}
		l.presubmitted = next.RunID
	}

	// 3. Train.
	t2 := time.Now()
	adapterPath, err := filepath.Abs(filepath.Join(c.WorkDir, "adapters", rep.Adapter))
	if err != nil {
		return rep, s, fmt.Errorf("adapter path: %w", err)
	}
	metrics := filepath.Join(dir, "metrics.json")
	var trainLoad float64 // model loads inside the training time
	if l.sup != nil {
		req := worker.TrainRequest{Mode: "grpo", Data: batch, Out: adapterPath, Recipe: c.Train.Recipe, Evaluate: true}
		if c.ServesFromWorker() {
			req.ServeAs = rep.Adapter
		}
		loadT := l.sup.LoadS
		res, err := l.sup.Train(ctx, req)
		trainLoad = l.sup.LoadS - loadT
		rep.ModelLoadS, rep.WorkerRestarts = l.sup.LoadS-load0, l.sup.Restarts-restarts0
		if err != nil {
			return rep, s, err
		}
		rep.Train = res.Metrics
		if err := writeJSON(metrics, res.Metrics); err != nil {
			return rep, s, err
		}
	} else {
		if err := l.trainStep(ctx, batch, adapterPath, s.AdapterPath, metrics, v+1); err != nil {
			return rep, s, err
		}
		if b, err := os.ReadFile(metrics); err == nil {
			_ = json.Unmarshal(b, &rep.Train)
		}
	}
	rep.TrainingS = time.Since(t2).Seconds()

	// 4. Load the adapter into the engine and announce the version.
	t3 := time.Now()
	if err := l.loadAdapter(ctx, rep.Adapter, adapterPath); err != nil {
		return rep, s, err
	}
	pv := schemas.PolicyVersion{Version: v + 1, Model: c.Serving.BaseModel, Adapter: rep.Adapter, CreatedAt: time.Now().UTC()}
	if err := l.conn.Publish(ctx, schemas.PolicyUpdated.For(strconv.Itoa(v+1)),
		schemas.MsgID("policy", c.RunPrefix, v+1), pv); err != nil {
		return rep, s, err
	}
	rep.LoadingS = time.Since(t3).Seconds()
	if total := rep.SamplingS + rep.WaitingS + rep.TrainingS + rep.LoadingS; total > 0 {
		rep.GPUIdle = 1 - (rep.TrainingS-trainLoad)/total
	}
	if e := c.Eval; e != nil && (it+1)%e.Every == 0 {
		t4 := time.Now()
		ev, err := l.evaluate(ctx, it, rep.Adapter, v+1)
		if err != nil {
			return rep, s, err
		}
		rep.Eval, rep.EvalS = &ev, time.Since(t4).Seconds()
	}
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return rep, s, err
	}
	l.log.Info("iteration done", "iteration", it, "version", v+1, "reward", rep.MeanReward, "success", rep.SuccessRate)
	return rep, State{Iteration: it + 1, Version: v + 1, Adapter: rep.Adapter, AdapterPath: adapterPath, UpdatedAt: time.Now().UTC()}, nil
}

// evaluate runs the held-out evaluation of model (version v) after
// iteration it and returns its success rate (infra failures excluded). The
// run id is deterministic, so a resumed iteration evaluates once.
func (l *Loop) evaluate(ctx context.Context, it int, model string, v int) (EvalResult, error) {
	c, e := l.cfg, l.cfg.Eval
	runID := fmt.Sprintf("%s-ev%04d", c.RunPrefix, it)
	spec := schemas.RunSpec{RunID: runID, Datasets: e.Datasets, Split: e.Split, TaskIDs: e.TaskIDs, Limit: e.Limit,
		Samples: e.Samples, Options: *c.Episode, MaxInFlight: c.MaxInFlight,
		Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: model, BaseURL: l.baseURL,
			APIKeyEnv: c.Serving.APIKeyEnv, Temperature: e.Temperature, Seed: c.Seed, MaxTokens: c.Serving.MaxTokens, Version: v},
		SubmittedAt: time.Now().UTC()}
	if err := bus.SubmitRun(ctx, l.conn, spec); err != nil {
		return EvalResult{}, err
	}
	scores, err := l.waitScores(ctx, runID)
	if err != nil {
		return EvalResult{}, fmt.Errorf("evaluation: %w", err)
	}
	r := EvalResult{RunID: runID, Model: model, Episodes: len(scores)}
	ok := 0
	for _, sc := range scores {
		if train.Infra(string(sc.Outcome)) {
			continue
		}
		r.Scored++
		if sc.Outcome == schemas.OutcomeCorrect {
			ok++
		}
	}
	if r.Scored > 0 {
		r.SuccessRate = float64(ok) / float64(r.Scored)
	}
	return r, nil
}

// spec is the run of iteration it, sampled from model at version v.
func (l *Loop) spec(it int, model string, v int) schemas.RunSpec {
	c := l.cfg
	return schemas.RunSpec{RunID: l.RunID(it), Datasets: c.Datasets, Split: c.Split, TaskIDs: l.taskIDs(it), Limit: c.Limit,
		SampleSeed: c.SampleSeed, Samples: c.Samples, Options: *c.Episode, MaxInFlight: c.MaxInFlight,
		Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: model, BaseURL: l.baseURL,
			APIKeyEnv: c.Serving.APIKeyEnv, Temperature: c.Temperature, Seed: c.Seed, MaxTokens: c.Serving.MaxTokens,
			Logprobs: c.Serving.Logprobs, Version: v},
		SubmittedAt: time.Now().UTC()}
}

// taskIDs returns iteration it's tasks: all of TaskIDs, or its window of
// TasksPerIteration.
func (l *Loop) taskIDs(it int) []string {
	ids, n := l.cfg.TaskIDs, l.cfg.TasksPerIteration
	if len(ids) == 0 || n <= 0 || n >= len(ids) {
		return ids
	}
	out := make([]string, n)
	for i := range out {
		out[i] = ids[(it*n+i)%len(ids)]
	}
	return out
}

// waitScores follows the run (bus.FollowRun, as `medgym run` does) until
// the dispatcher's run status says it is finished; the last step holds
// the scores that finished it. Only scores of episodes the run's spec
// plans are returned, the first of each: a forged score with an unplanned
// id, from any client allowed to publish scores, neither ends the wait nor
// enters the batch.
func (l *Loop) waitScores(ctx context.Context, runID string) (map[string]schemas.Score, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(l.cfg.WaitTimeout))
	defer cancel()
	read := map[string]schemas.Score{}
	var rs schemas.RunStatus
	for p, err := range bus.FollowRun(ctx, l.conn, runID, time.Second) {
		rs = p.Status
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("run %s: %d/%d scores: %w", runID, rs.Done, rs.Total, ctx.Err())
			}
			return nil, err
		}
		if p.Err != nil {
			// NATS is down or restarting: the follow resumes after the
			// last score it delivered (WaitTimeout bounds the whole wait).
			l.log.Warn("follow scores: retrying", "run", runID, "err", p.Err)
		}
		for _, sc := range p.Scores {
			if _, dup := read[sc.EpisodeID]; !dup {
				read[sc.EpisodeID] = sc
			}
		}
	}
	return plannedScores(rs.Spec, read, l.log), nil
}

// plannedScores keeps the scores of episodes spec plans.
func plannedScores(spec schemas.RunSpec, read map[string]schemas.Score, log *slog.Logger) map[string]schemas.Score {
	out := make(map[string]schemas.Score, len(read))
	var ignored int
	var first error
	for id, sc := range read {
		claim := schemas.EpisodeClaim{RunID: sc.RunID, EpisodeID: sc.EpisodeID, TaskID: sc.TaskID, Dataset: sc.Dataset,
			Category: sc.Category, Sample: sc.SampleIndex}
		if err := spec.Admits(claim); err != nil {
			ignored++
			first = cmp.Or(first, err)
			continue
		}
		out[id] = sc
	}
	if ignored > 0 {
		log.Warn("scores of unplanned episodes ignored", "run", spec.RunID, "count", ignored, "first", first)
	}
	return out
}

// readRows reads the current run (which must hold every scored episode)
// and the runs of the Replay iterations before it.
func (l *Loop) readRows(ctx context.Context, it, scored int) ([]parquet.Row, error) {
	cur, err := train.ReadRun(ctx, l.st, l.RunID(it))
	if err != nil {
		return nil, err
	}
	if len(cur) < scored {
		return nil, fmt.Errorf("run %s: %d rows stored for %d scores", l.RunID(it), len(cur), scored)
	}
	rows := cur
	for back := 1; back <= l.cfg.Stale.Replay && it-back >= 0; back++ {
		old, err := train.ReadRun(ctx, l.st, l.RunID(it-back))
		if err != nil {
			return nil, err
		}
		rows = append(rows, old...)
	}
	out := rows[:0]
	for _, r := range rows {
		if !train.Infra(r.Outcome) {
			out = append(out, r)
		}
	}
	return out, nil
}

// staleness applies the bound: rows more than MaxLag versions behind v are
// dropped, or re-weighted by Decay^(lag−MaxLag).
func (l *Loop) staleness(rows []parquet.Row, v int, rep *Report) ([]parquet.Row, map[string]float64) {
	weights := map[string]float64{}
	var kept []parquet.Row
	for _, r := range rows {
		lag := v - int(r.PolicyVersion)
		w := 1.0
		if lag > l.cfg.Stale.MaxLag {
			if l.cfg.Stale.Mode == "drop" {
				rep.StaleDropped++
				continue
			}
			w = math.Pow(l.cfg.Stale.Decay, float64(lag-l.cfg.Stale.MaxLag))
			rep.Reweighted++
		}
		weights[r.RunID+"/"+r.EpisodeID] = w
		kept = append(kept, r)
	}
	return kept, weights
}

func (l *Loop) trainStep(ctx context.Context, batch, out, init, metrics string, version int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(l.cfg.Train.Timeout))
	defer cancel()
	repl := strings.NewReplacer("{batch}", batch, "{out}", out, "{init}", init, "{metrics}", metrics,
		"{version}", strconv.Itoa(version))
	args := make([]string, len(l.cfg.Train.Command))
	for i, a := range l.cfg.Train.Command {
		args[i] = repl.Replace(a)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = l.cfg.Train.Dir
	var tail bytes.Buffer
	cmd.Stdout, cmd.Stderr = &tail, &tail
	if err := cmd.Run(); err != nil {
		b := tail.Bytes()
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		return fmt.Errorf("training step %s: %w\n%s", args[0], err, b)
	}
	l.log.Debug("training step done", "output", tail.String())
	return nil
}

// loadAdapter asks the engine to load the adapter (vLLM's
// POST /v1/load_lora_adapter). An adapter that is already loaded is fine:
// a resumed iteration loads it again.
func (l *Loop) loadAdapter(ctx context.Context, name, path string) error {
	if l.cfg.Serving.AdapterDir != "" && !l.cfg.ServesFromWorker() {
		path = filepath.Join(l.cfg.Serving.AdapterDir, filepath.Base(path))
	}
	body, _ := json.Marshal(map[string]string{"lora_name": name, "lora_path": path})
	url := strings.TrimRight(l.baseURL, "/") + "/load_lora_adapter"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("load adapter %s: %w", name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if k := os.Getenv(l.cfg.Serving.APIKeyEnv); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	resp, err := l.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("load adapter %s: %w", name, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK || (resp.StatusCode == http.StatusBadRequest && strings.Contains(string(msg), "already been loaded")) {
		return nil
	}
	return fmt.Errorf("load adapter %s from %s: %s: %s", name, path, resp.Status, msg)
}

// serveAt is where the resident worker serves: listen (host:port), by
// default 127.0.0.1 on a port free now, kept for the whole run so a
// restarted worker is found at the same URL.
func serveAt(listen, name string) (*worker.Serve, error) {
	host, port := "127.0.0.1", "0"
	if listen != "" {
		var err error
		if host, port, err = net.SplitHostPort(listen); err != nil {
			return nil, fmt.Errorf("serving.listen %q: %w", listen, err)
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return nil, fmt.Errorf("serving.listen %q: bad port", listen)
	}
	if p == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("serving: a free port on %s: %w", host, err)
		}
		p = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
	}
	return &worker.Serve{Host: host, Port: p, Name: name}, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
