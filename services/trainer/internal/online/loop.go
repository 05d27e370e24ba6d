package online

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/internal/train"
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
}

// Loop runs the online iterations.
type Loop struct {
	cfg   Config
	conn  *bus.Conn
	st    *store.Store
	log   *slog.Logger
	out   io.Writer
	httpc *http.Client
}

// New returns a loop over conn and the store; per-iteration lines go to out.
func New(cfg Config, conn *bus.Conn, st *store.Store, out io.Writer, log *slog.Logger) *Loop {
	return &Loop{cfg: cfg.WithDefaults(), conn: conn, st: st, log: log, out: out, httpc: &http.Client{Timeout: 5 * time.Minute}}
}

// Run connects to NATS and the store named in cfg and runs the loop until
// cfg.Iterations are complete or ctx ends.
func Run(ctx context.Context, cfg Config, out io.Writer, log *slog.Logger) ([]Report, error) {
	auth, err := bus.AuthFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	conn, err := bus.Connect(ctx, cfg.NATS, "medgym-trainer", log, bus.WithAuth(auth))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn.JS, bus.StreamOptions{}); err != nil {
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
	if s.Iteration > 0 {
		l.log.Info("resuming", "iteration", s.Iteration, "version", s.Version, "adapter", s.Adapter)
		if s.Adapter != "" { // the engine may have restarted since
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
	rep := Report{Iteration: it, RunID: runID, FromVersion: v, ToVersion: v + 1, Adapter: l.AdapterName(v + 1)}

	// 1. Sample: submit the batch and follow its scores as they stream in.
	t0 := time.Now()
	spec := schemas.RunSpec{RunID: runID, Datasets: c.Datasets, Split: c.Split, TaskIDs: l.taskIDs(it), Limit: c.Limit,
		SampleSeed: c.SampleSeed, Samples: c.Samples, Options: *c.Episode, MaxInFlight: c.MaxInFlight,
		Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: model, BaseURL: c.Serving.BaseURL,
			APIKeyEnv: c.Serving.APIKeyEnv, Temperature: c.Temperature, Seed: c.Seed, MaxTokens: c.Serving.MaxTokens,
			Logprobs: c.Serving.Logprobs, Version: v},
		SubmittedAt: time.Now().UTC()}
	if err := l.conn.Publish(ctx, schemas.RunSubmitted.For(runID), schemas.MsgID("run", runID), spec); err != nil {
		return rep, s, err
	}
	scores, err := l.waitScores(ctx, runID, len(spec.TaskIDs)*c.Samples)
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
		eps[i] = train.NewEpisode(&kept[i], train.RoleTool)
	}
	recs, gst := train.GRPO(eps, train.GRPOOptions{Eps: c.GRPO.Eps, Scale: c.GRPO.Scale, DropZeroVariance: c.GRPO.DropZeroVariance,
		Weight: func(r *parquet.Row) float64 { return weights[r.RunID+"/"+r.EpisodeID] }})
	rep.BatchRows, rep.Groups, rep.Samples = len(kept), gst.Groups, gst.Samples
	batch := filepath.Join(dir, "batch.jsonl")
	if _, err := train.WriteJSONL(batch, recs); err != nil {
		return rep, s, err
	}
	rep.WaitingS = time.Since(t1).Seconds()

	// 3. Train.
	t2 := time.Now()
	adapterPath, err := filepath.Abs(filepath.Join(c.WorkDir, "adapters", rep.Adapter))
	if err != nil {
		return rep, s, fmt.Errorf("adapter path: %w", err)
	}
	metrics := filepath.Join(dir, "metrics.json")
	if err := l.trainStep(ctx, batch, adapterPath, s.AdapterPath, metrics, v+1); err != nil {
		return rep, s, err
	}
	if b, err := os.ReadFile(metrics); err == nil {
		_ = json.Unmarshal(b, &rep.Train)
	}
	rep.TrainingS = time.Since(t2).Seconds()

	// 4. Load the adapter into the engine and announce the version.
	t3 := time.Now()
	if err := l.loadAdapter(ctx, rep.Adapter, adapterPath); err != nil {
		return rep, s, err
	}
	pv := schemas.PolicyVersion{Version: v + 1, Model: c.Serving.BaseModel, Adapter: rep.Adapter, CreatedAt: time.Now().UTC()}
	if err := l.conn.Publish(ctx, schemas.PolicyUpdated.For(strconv.Itoa(v+1)),
		schemas.MsgID("policy", c.RunPrefix, v+1), policyMsg{pv}); err != nil {
		return rep, s, err
	}
	rep.LoadingS = time.Since(t3).Seconds()
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return rep, s, err
	}
	l.log.Info("iteration done", "iteration", it, "version", v+1, "reward", rep.MeanReward, "success", rep.SuccessRate)
	return rep, State{Iteration: it + 1, Version: v + 1, Adapter: rep.Adapter, AdapterPath: adapterPath, UpdatedAt: time.Now().UTC()}, nil
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

// waitScores consumes the run's scores from JetStream until every episode
// has one. total is known when the config names the tasks (else 0: it
// comes from the dispatcher's run status).
func (l *Loop) waitScores(ctx context.Context, runID string, total int) (map[string]schemas.Score, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(l.cfg.WaitTimeout))
	defer cancel()
	cons, err := l.conn.JS.OrderedConsumer(ctx, schemas.StreamScores, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schemas.EpisodeScored.For(runID)}})
	if err != nil {
		return nil, fmt.Errorf("follow scores of %s: %w", runID, err)
	}
	kv, err := l.conn.JS.KeyValue(ctx, schemas.BucketRuns)
	if err != nil {
		return nil, fmt.Errorf("runs bucket: %w", err)
	}
	scores := map[string]schemas.Score{}
	for total == 0 || len(scores) < total {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("run %s: %d/%d scores: %w", runID, len(scores), total, ctx.Err())
		case errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			// no score within the wait: look again
		case err != nil:
			// NATS is down or restarting: the ordered consumer resumes
			// after the last score it delivered, so wait and look again
			// (WaitTimeout bounds the whole wait).
			l.log.Warn("follow scores: retrying", "run", runID, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		default:
			sc, err := schemas.Decode[schemas.Score](msg.Data())
			if err != nil {
				l.log.Warn("undecodable score", "run", runID, "err", err)
				continue
			}
			scores[sc.EpisodeID] = sc
		}
		if len(l.cfg.TaskIDs) == 0 {
			if e, err := kv.Get(ctx, runID); err == nil {
				var rs schemas.RunStatus
				if json.Unmarshal(e.Value(), &rs) == nil {
					if rs.Error != "" {
						return nil, fmt.Errorf("run %s rejected by the dispatcher: %s", runID, rs.Error)
					}
					total = rs.Total
				}
			}
		}
	}
	return scores, nil
}

// readRows reads the current run (which must hold every scored episode)
// and the runs of the Replay iterations before it.
func (l *Loop) readRows(ctx context.Context, it, scored int) ([]parquet.Row, error) {
	cur, err := l.st.ReadRun(ctx, l.RunID(it))
	if err != nil {
		return nil, err
	}
	if len(cur) < scored {
		return nil, fmt.Errorf("run %s: %d rows stored for %d scores", l.RunID(it), len(cur), scored)
	}
	rows := cur
	for back := 1; back <= l.cfg.Stale.Replay && it-back >= 0; back++ {
		old, err := l.st.ReadRun(ctx, l.RunID(it-back))
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
	if l.cfg.Serving.AdapterDir != "" {
		path = filepath.Join(l.cfg.Serving.AdapterDir, filepath.Base(path))
	}
	body, _ := json.Marshal(map[string]string{"lora_name": name, "lora_path": path})
	url := strings.TrimRight(l.cfg.Serving.BaseURL, "/") + "/load_lora_adapter"
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

// policyMsg gives schemas.PolicyVersion the Validate method bus.Publish
// needs (the contract type has none yet); it encodes as the plain struct.
type policyMsg struct{ schemas.PolicyVersion }

// Validate checks the announcement.
func (p policyMsg) Validate() error {
	if p.Version < 1 || p.Model == "" {
		return fmt.Errorf("policy version %d of model %q: want version ≥ 1 and a model", p.Version, p.Model)
	}
	return nil
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
