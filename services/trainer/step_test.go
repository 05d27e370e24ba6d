package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/medgym/medgym/services/trainer/trainertest"
	"github.com/medgym/medgym/services/trainer/worker"
)

// python is the interpreter with torch (the project venv; see
// trainertest.Python).
func python(t *testing.T, modules ...string) string {
	t.Helper()
	return trainertest.Python(t, modules...)
}

// TestTrainStepPythonUnits runs python/test_*.py (unittest): fitting
// conversations into --max-len keeps the system prompt, the task and every
// assistant turn, elides middle observations with a marker, drops and
// counts what cannot fit; the per-mode recipes and their overrides; and
// gradient accumulation (MicroBatchTest: one sequence per forward/backward
// follows the whole-batch loss curve within 1e-4).
func TestTrainStepPythonUnits(t *testing.T) {
	py := python(t)
	out, err := exec.Command(py, "-m", "unittest", "discover", "-s", "python", "-p", "test_*.py").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestTrainStepLosses runs python/train_step.py on the toy batches in
// testdata with the CPU backend and checks that each loss does its job.
func TestTrainStepLosses(t *testing.T) {
	py := python(t)
	type metrics struct {
		Backend       string             `json:"backend"`
		Steps         int                `json:"steps"`
		Before, After map[string]float64 `json:"-"`
		RawBefore     json.RawMessage    `json:"before"`
		RawAfter      json.RawMessage    `json:"after"`
	}
	for _, mode := range []string{"sft", "dpo", "grpo"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "ckpt")
			cmd := exec.Command(py, "python/train_step.py", "--mode", mode, "--backend", "tiny",
				"--data", "testdata/toy_"+mode+".jsonl", "--out", out, "--steps", "15", "--metrics", filepath.Join(dir, "m.json"))
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			b, err := os.ReadFile(filepath.Join(dir, "m.json"))
			if err != nil {
				t.Fatal(err)
			}
			var m metrics
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal(m.RawBefore, &m.Before)
			_ = json.Unmarshal(m.RawAfter, &m.After)
			if m.Backend != "tiny" || m.Steps != 15 {
				t.Fatalf("metrics %s", b)
			}
			if _, err := os.Stat(filepath.Join(out, "model.pt")); err != nil {
				t.Fatalf("no checkpoint: %v", err)
			}
			switch mode {
			case "sft":
				if m.After["sft_loss"] >= m.Before["sft_loss"]-0.5 {
					t.Fatalf("SFT loss %v → %v did not fall", m.Before["sft_loss"], m.After["sft_loss"])
				}
			case "dpo":
				if m.Before["dpo_margin"] != 0 || m.After["dpo_margin"] <= 0.1 || m.After["dpo_loss"] >= m.Before["dpo_loss"] {
					t.Fatalf("DPO margin %v → %v, loss %v → %v", m.Before["dpo_margin"], m.After["dpo_margin"], m.Before["dpo_loss"], m.After["dpo_loss"])
				}
			case "grpo":
				if m.After["pos_logp"] <= m.Before["pos_logp"] || m.After["neg_logp"] >= m.Before["neg_logp"] || m.After["kl"] <= 0 {
					t.Fatalf("GRPO pos logp %v → %v, neg %v → %v, kl %v", m.Before["pos_logp"], m.After["pos_logp"],
						m.Before["neg_logp"], m.After["neg_logp"], m.After["kl"])
				}
			}
		})
	}
}

// TestGPUCheckTiny runs python/gpu_check.sh --tiny, the GPU check a
// session with a device runs, at tiny sizes on the CPU: hf_check.py (the hf
// backend, transformers and peft from the project venv, on a tiny random
// Llama: loss masks, the three losses, the resident worker and its policy
// server, peft adapter output, a resume) and gpu_bench.py (both training
// paths and generation from the worker's server); the summary line must
// report success and the benchmark's figures, the resident worker's fixed
// cost per iteration below the per-process path's.
func TestGPUCheckTiny(t *testing.T) {
	py := python(t, "transformers", "peft")
	cmd := exec.Command("python/gpu_check.sh", "--tiny", "--work", t.TempDir())
	cmd.Env = append(os.Environ(), "MEDGYM_PYTHON="+py)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu_check: %v\n%s", err, out)
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var sum struct {
		Check struct {
			OK    bool `json:"ok"`
			Bench struct {
				ResidentFixed   *float64 `json:"resident_fixed_s_per_iteration"`
				PerProcessFixed *float64 `json:"per_process_fixed_s_per_iteration"`
				TokensPerS      *float64 `json:"tokens_per_s"`
				ServeTokensPerS *float64 `json:"serve_tokens_per_s"`
				Prepare         *float64 `json:"resident_prepare_s"`
				Save            *float64 `json:"resident_save_s"`
				Other           *float64 `json:"resident_other_s"`
				Start           *float64 `json:"per_process_start_s"`
			} `json:"bench"`
		} `json:"gpu_check"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &sum); err != nil || !sum.Check.OK {
		t.Fatalf("summary %v:\n%s", err, out)
	}
	b := sum.Check.Bench
	if b.ResidentFixed == nil || b.PerProcessFixed == nil || b.TokensPerS == nil || *b.TokensPerS <= 0 ||
		b.ServeTokensPerS == nil || *b.ServeTokensPerS <= 0 || b.Prepare == nil || b.Save == nil || b.Other == nil ||
		b.Start == nil {
		t.Fatalf("benchmark figures missing: %s", lines[len(lines)-1])
	}
	// The resident worker's reason to exist: per iteration it pays no
	// process start, imports or model load.
	if *b.ResidentFixed >= *b.PerProcessFixed {
		t.Fatalf("resident worker's fixed cost per iteration %gs is not below one process per iteration's %gs",
			*b.ResidentFixed, *b.PerProcessFixed)
	}
	// The split accounts for the whole fixed cost (each part is rounded to
	// 0.01 s per iteration, then averaged), and what the resident worker
	// pays outside arithmetic (save, request) is below what one process
	// per iteration pays before it even reads its batch.
	if parts := *b.Prepare + *b.Save + *b.Other; math.Abs(parts-*b.ResidentFixed) > 0.05 || *b.Prepare < 0 || *b.Save < 0 {
		t.Fatalf("resident fixed cost %gs != prepare %g + save %g + other %g", *b.ResidentFixed, *b.Prepare, *b.Save, *b.Other)
	}
	if *b.Save+*b.Other >= *b.Start {
		t.Fatalf("resident save+request %gs not below one process's start %gs", *b.Save+*b.Other, *b.Start)
	}
	t.Logf("%s", lines[len(lines)-1])
}

// halfBatch writes the even records of testdata/toy_grpo.jsonl (one of two
// data-parallel shards) to dir/half.jsonl.
func halfBatch(t *testing.T, dir string) string {
	t.Helper()
	recs, err := os.ReadFile("testdata/toy_grpo.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var even []byte
	for i, line := range bytes.Split(bytes.TrimSpace(recs), []byte("\n")) {
		if i%2 == 0 {
			even = append(append(even, line...), '\n')
		}
	}
	half := filepath.Join(dir, "half.jsonl")
	if err := os.WriteFile(half, even, 0o644); err != nil {
		t.Fatal(err)
	}
	return half
}

// checkDataParallel compares tiny checkpoints under dir: ddp (rank 0) and
// ddp.rank1 equal, equal within tolerance to union (one process on the
// whole batch), far from half (one process on rank 0's shard).
func checkDataParallel(t *testing.T, py, dir string) {
	t.Helper()
	cmp := `import json, sys, torch
a, b = (torch.load(p + "/model.pt") for p in sys.argv[1:3])
print(json.dumps(max((a[k] - b[k]).abs().max().item() for k in a)))`
	diff := func(x, y string) float64 {
		t.Helper()
		out, err := exec.Command(py, "-c", cmp, filepath.Join(dir, x), filepath.Join(dir, y)).CombinedOutput()
		if err != nil {
			t.Fatalf("compare %s %s: %v\n%s", x, y, err, out)
		}
		var d float64
		if err := json.Unmarshal(bytes.TrimSpace(out), &d); err != nil {
			t.Fatalf("compare: %s", out)
		}
		return d
	}
	ranks, union, alone := diff("ddp", "ddp.rank1"), diff("ddp", "union"), diff("ddp", "half")
	t.Logf("max |Δw|: rank 0 vs rank 1 %g, vs one process on the union %g, vs one on a half %g", ranks, union, alone)
	if ranks > 1e-6 || union > 1e-4 || alone < 100*max(union, 1e-6) {
		t.Fatalf("rank 0 vs rank 1 %g (want ≈ 0), vs the union %g (want < 1e-4), vs a half %g (want far larger)", ranks, union, alone)
	}
}

var torchrun = []string{"-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"}

// TestTrainStepDataParallel runs train_step.py under torchrun with 2 ranks
// (gloo, CPU), each on its half of the toy GRPO batch: both ranks end with
// the same weights, equal within float tolerance to one process trained on
// the whole batch, and unlike a run on either half alone.
func TestTrainStepDataParallel(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	half := halfBatch(t, dir)
	step := []string{"python/train_step.py", "--mode", "grpo", "--backend", "tiny", "--steps", "3", "--micro-batch", "2"}
	runStep := func(launcher []string, data, out string) {
		t.Helper()
		args := append(append(append([]string(nil), launcher...), step...), "--data", data, "--out", out)
		cmd := exec.Command(py, args...)
		cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, b)
		}
	}
	runStep(torchrun, "testdata/toy_grpo.jsonl", filepath.Join(dir, "ddp"))
	runStep(nil, "testdata/toy_grpo.jsonl", filepath.Join(dir, "union"))
	runStep(nil, half, filepath.Join(dir, "half"))
	checkDataParallel(t, py, dir)
}

// TestResidentWorkerDataParallel runs the resident worker under torchrun
// with 2 ranks (gloo, CPU) through the Go client: rank 0 reads each request
// and hands it to rank 1, each trains on its shard; after two requests (the
// optimiser state carried from the first to the second) both ranks hold the
// same weights, equal within tolerance to one worker given the whole batch,
// and unlike one given rank 0's half alone.
func TestResidentWorkerDataParallel(t *testing.T) {
	py := python(t)
	t.Setenv("OMP_NUM_THREADS", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	half := halfBatch(t, dir)
	steps, mb := 2, 2
	run := func(launcher []string, data, out string) {
		t.Helper()
		cmd := append(append([]string{py}, launcher...), "python/worker.py", "--backend", "tiny")
		p, err := worker.Start(ctx, cmd, "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Kill()
		want := 1
		if launcher != nil {
			want = 2
		}
		if p.Ready.World != want {
			t.Fatalf("worker world %d, want %d", p.Ready.World, want)
		}
		for i := range 2 {
			res, err := p.Train(ctx, worker.TrainRequest{Mode: "grpo", Data: data, Out: filepath.Join(dir, out),
				Recipe: worker.Recipe{Steps: &steps, MicroBatch: &mb}})
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if res.Metrics["steps"] != 2.0 {
				t.Fatalf("metrics %v", res.Metrics)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run(torchrun, "testdata/toy_grpo.jsonl", "ddp")
	run(nil, "testdata/toy_grpo.jsonl", "union")
	run(nil, half, "half")
	checkDataParallel(t, py, dir)
}
