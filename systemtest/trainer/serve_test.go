package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/online"
	"github.com/medgym/medgym/services/trainer/trainertest"
	"github.com/medgym/medgym/services/trainer/worker"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/systemtest/testenv"
)

// relogprobs recomputes, with the training code (train_step.HFBackend), the
// log-probabilities of each (prompt, completion) token pair under the base
// model with the adapter at init.
const relogprobs = `import argparse, json, sys, torch
sys.path.insert(0, sys.argv[1])
import train_step
be = train_step.HFBackend(argparse.Namespace(model=sys.argv[2], init=sys.argv[3], grad_ckpt=False, lora_r=8))
out = []
for p, c in json.load(sys.stdin):
    x = torch.tensor([p + c])
    with torch.no_grad():
        out.append(be.logps(be.model, x, torch.ones_like(x))[0, len(p) - 1:].tolist())
print(json.dumps(out))`

// TestOnlineLoopServesItsOwnPolicy: without an external engine
// (serving.base_url empty) the resident worker serves the policy it trains
// (hf backend: LoRA on a tiny random Llama, on the CPU). Iteration 0
// samples the worker's initial weights (an SFT adapter) under the base
// name; iteration 1 samples "srv-v1", the weights the worker trained in
// iteration 0: its recorded logprobs are those the saved v1 adapter gives
// (recomputed by the training code) and differ from the initial weights',
// while iteration 0's match the initial weights (the positive control of
// the recomputation). The rows' policy version advances; the model is
// loaded once.
func TestOnlineLoopServesItsOwnPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	py := trainertest.Python(t, "transformers", "peft")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	work := t.TempDir()
	pyDir, _ := filepath.Abs(filepath.Join("..", "..", "services", "trainer", "python"))
	model, sft := filepath.Join(work, "tiny-llama"), filepath.Join(work, "sft")
	for _, args := range [][]string{{"tinyllama.py", model},
		{"train_step.py", "--mode", "sft", "--backend", "hf", "--model", model, "--lora-r", "8", "--data", "../testdata/toy_sft.jsonl",
			"--out", sft, "--steps", "3", "--lr", "1e-2"}} {
		cmd := exec.CommandContext(ctx, py, args...)
		cmd.Dir = pyDir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, b)
		}
	}
	env := testenv.Start(t, 1) // one task, K = 2: the CPU step on ~4k-token MedCalc prompts is the slow part
	steps, lr, temp, seed := 1, 1e-2, 1.0, int64(0)
	cfg := online.Config{NATS: env.NATSURL, Store: env.Store, WorkDir: work, RunPrefix: "srv", Iterations: 2,
		Datasets: []string{"medcalcbench"}, Split: "test", TaskIDs: env.TaskIDs(), Samples: 2, Temperature: &temp, Seed: &seed,
		Episode: &schemas.EpisodeOptions{MaxTurns: 1, EndOn: schemas.EndOnAccepted, ActionTimeoutSec: 30},
		Serving: online.Serving{BaseModel: "tiny-llama", AdapterPrefix: "srv", Logprobs: true, MaxTokens: 12},
		Train: online.TrainCommand{Resident: []string{py, filepath.Join(pyDir, "worker.py"), "--backend", "hf", "--model", model,
			"--lora-r", "8", "--init", sft}, Recipe: worker.Recipe{Steps: &steps, LR: &lr}},
		Stale: online.Staleness{MaxLag: 1}, WaitTimeout: online.Duration(6 * time.Minute)}
	st, err := store.Open(ctx, env.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	reps, err := online.New(cfg, env.Conn, st, &out, slog.New(slog.NewTextHandler(io.Discard, nil))).Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(reps) != 2 || reps[0].ModelLoadS <= 0 || reps[1].ModelLoadS != 0 || reps[1].WorkerRestarts != 0 {
		t.Fatalf("reports %+v", reps)
	}
	var pairs [][2][]int32
	var recorded [][]float32
	for it, want := range []string{"tiny-llama", "srv-v1"} {
		rows, err := st.ReadRun(ctx, fmt.Sprintf("srv-it%04d", it))
		if err != nil || len(rows) != 2 {
			t.Fatalf("run %d: %d rows, %v", it, len(rows), err)
		}
		for _, r := range rows {
			if r.Model != want || int(r.PolicyVersion) != it || len(r.Turns) == 0 {
				t.Fatalf("run %d row sampled by %q at v%d with %d turns, want %s at v%d", it, r.Model, r.PolicyVersion, len(r.Turns), want, it)
			}
			for _, tn := range r.Turns {
				if len(tn.CompletionTokenIDs) == 0 || len(tn.CompletionLogprobs) != len(tn.CompletionTokenIDs) || len(tn.PromptTokenIDs) == 0 {
					t.Fatalf("turn without the server's token ids/logprobs: %d prompt ids, %d ids, %d logprobs",
						len(tn.PromptTokenIDs), len(tn.CompletionTokenIDs), len(tn.CompletionLogprobs))
				}
			}
		}
		tn := firstTurn(rows)
		pairs = append(pairs, [2][]int32{tn.PromptTokenIDs, tn.CompletionTokenIDs})
		recorded = append(recorded, tn.CompletionLogprobs)
	}
	under := func(init string) [][]float64 {
		t.Helper()
		cmd := exec.CommandContext(ctx, py, "-c", relogprobs, pyDir, model, init)
		in, _ := json.Marshal(pairs)
		cmd.Stdin = bytes.NewReader(in)
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("recompute logprobs: %v", err)
		}
		var lps [][]float64
		if err := json.Unmarshal(b[bytes.LastIndexByte(bytes.TrimSpace(b), '\n')+1:], &lps); err != nil {
			t.Fatalf("recompute logprobs: %s", b)
		}
		return lps
	}
	initial, v1 := under(sft), under(filepath.Join(work, "adapters", "srv-v1"))
	d := func(a []float32, b []float64) float64 {
		m := 0.0
		for i := range a {
			m = math.Max(m, math.Abs(float64(a[i])-b[i]))
		}
		return m
	}
	t.Logf("max |Δ logprob|: it0 vs initial %g, it1 vs v1 %g, it1 vs initial %g", d(recorded[0], initial[0]), d(recorded[1], v1[1]), d(recorded[1], initial[1]))
	if d(recorded[0], initial[0]) > 1e-4 || d(recorded[1], v1[1]) > 1e-4 || d(recorded[1], initial[1]) < 1e-3 {
		t.Fatalf("iteration 0 must be sampled from the initial weights, iteration 1 from v1 (unlike the initial weights)")
	}
	if !strings.Contains(out.String(), "v0→v1") || !strings.Contains(out.String(), "v1→v2") {
		t.Fatalf("progress lines:\n%s", out.String())
	}
}

// firstTurn is the first turn of the first sample of the run's first task
// (rows in a stable order).
func firstTurn(rows []parquet.Row) parquet.Turn {
	best := rows[0]
	for _, r := range rows[1:] {
		if r.TaskID < best.TaskID || (r.TaskID == best.TaskID && r.SampleIndex < best.SampleIndex) {
			best = r
		}
	}
	return best.Turns[0]
}
