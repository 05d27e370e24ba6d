package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/medgym/medgym/services/trainer/train"
	"github.com/medgym/medgym/services/trainer/worker"
)

// cmdTrain is an offline training job through one resident worker: the
// model is loaded once, the data is cut into batches, and each batch is one
// worker step (the optimiser state carries over); the adapter is saved
// after every step to OUT/adapter, the step metrics appended to
// OUT/metrics.jsonl.
func cmdTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", "", "sft, dpo or grpo (the records of trainer build's sft/, dpo/, grpo/ or verifier/ files)")
	var data listFlag
	fs.Var(&data, "data", "JSONL records (repeatable)")
	out := fs.String("out", "", "output directory: adapter/ and metrics.jsonl")
	py := fs.String("python", defaultPython(), "Python interpreter with torch (transformers and peft for hf)")
	script := fs.String("worker", "services/trainer/python/worker.py", "the worker script")
	backend := fs.String("backend", "hf", "hf (LoRA on --model) or tiny (the CPU test model)")
	model := fs.String("model", "", "Hugging Face model id or path (hf)")
	init := fs.String("init", "", "adapter to start from (with its optimiser state, when saved by a worker)")
	batch := fs.Int("batch-size", 64, "records per step")
	epochs := fs.Int("epochs", 1, "passes over the data")
	var rc worker.Recipe
	steps := fs.Int("steps", 1, "optimisation steps per batch")
	lr := fs.Float64("lr", 0, "learning rate (0: the mode's default: SFT 1e-4, DPO 5e-6, GRPO 1e-5)")
	beta := fs.Float64("beta", 0, "DPO β (0: 0.1)")
	kl := fs.Float64("kl-coef", -1, "GRPO KL coefficient (-1: 1e-3)")
	maxLen := fs.Int("max-len", 0, "tokens per conversation (0: the step's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *mode != "sft" && *mode != "dpo" && *mode != "grpo" {
		return fmt.Errorf("train: --mode %q (want sft, dpo or grpo)", *mode)
	}
	if len(data) == 0 || *out == "" {
		return errors.New("train: --data and --out are required")
	}
	if *batch < 1 || *epochs < 1 || *steps < 1 {
		return errors.New("train: --batch-size, --epochs and --steps must be ≥ 1")
	}
	if *backend == "hf" && *model == "" {
		return errors.New("train: --backend hf needs --model")
	}
	rc.Steps = steps
	if *lr > 0 {
		rc.LR = lr
	}
	if *beta > 0 {
		rc.Beta = beta
	}
	if *kl >= 0 {
		rc.KLCoef = kl
	}
	if *maxLen > 0 {
		rc.MaxLen = maxLen
	}
	batches, err := writeBatches(data, filepath.Join(*out, "batches"), *batch)
	if err != nil {
		return err
	}
	cmd := []string{*py, *script, "--backend", *backend}
	if *model != "" {
		cmd = append(cmd, "--model", *model)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	sup := &worker.Supervisor{Command: cmd, Init: *init, Log: log}
	defer func() {
		if err := sup.Close(); err != nil {
			log.Warn("trainer worker shutdown", "err", err)
		}
	}()
	adapter, err := filepath.Abs(filepath.Join(*out, "adapter"))
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	mf, err := os.OpenFile(filepath.Join(*out, "metrics.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	defer mf.Close()
	enc := json.NewEncoder(mf)
	n := 0
	for ep := range *epochs {
		for _, b := range batches {
			res, err := sup.Train(ctx, worker.TrainRequest{Mode: *mode, Data: b, Out: adapter, Recipe: rc})
			if err != nil {
				return fmt.Errorf("train: epoch %d, %s: %w", ep, filepath.Base(b), err)
			}
			n++
			res.Metrics["epoch"], res.Metrics["batch"] = ep, filepath.Base(b)
			if err := enc.Encode(res.Metrics); err != nil {
				return fmt.Errorf("train: metrics: %w", err)
			}
			fmt.Fprintf(stdout, "epoch %d %s: %v records, loss %v (%.1fs)\n", ep, filepath.Base(b),
				res.Metrics["trained_records"], res.Metrics["loss"], res.TrainS)
		}
	}
	fmt.Fprintf(stdout, "%d steps on %d batches; model loaded %d time(s) (%.1fs); adapter in %s\n",
		n, len(batches), sup.Restarts+1, sup.LoadS, adapter)
	return nil
}

// writeBatches cuts the records of files into batch files of size records.
func writeBatches(files []string, dir string, size int) ([]string, error) {
	var recs []json.RawMessage
	for _, f := range files {
		rs, err := train.ReadJSONL[json.RawMessage](f)
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		recs = append(recs, rs...)
	}
	if len(recs) == 0 {
		return nil, errors.New("train: no records in --data")
	}
	var out []string
	for i := 0; i < len(recs); i += size {
		p, err := filepath.Abs(filepath.Join(dir, fmt.Sprintf("batch-%04d.jsonl", len(out))))
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		if _, err := train.WriteJSONL(p, recs[i:min(i+size, len(recs))]); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// defaultPython is $MEDGYM_PYTHON, else .venv/bin/python when it exists
// here, else python3.
func defaultPython() string {
	if p := os.Getenv("MEDGYM_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat(".venv/bin/python"); err == nil {
		return ".venv/bin/python"
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p
	}
	return "python3"
}
