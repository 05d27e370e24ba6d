package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/services/trainer/train"
)

// TestTrainCommand: `trainer train` runs an offline job through one
// resident worker: the toy SFT data in batches of 2 for 2 epochs is 4
// steps on one model load, the adapter and the per-step metrics are
// written, and the loss falls across the job.
func TestTrainCommand(t *testing.T) {
	py := python(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"train", "--mode", "sft", "--data", "testdata/toy_sft.jsonl", "--out", out,
		"--python", py, "--worker", "python/worker.py", "--backend", "tiny", "--batch-size", "2", "--epochs", "2", "--steps", "3"},
		&stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "4 steps on 2 batches; model loaded 1 time(s)") {
		t.Fatalf("output:\n%s", stdout.String())
	}
	ms, err := train.ReadJSONL[struct {
		Loss   []float64      `json:"loss"`
		Recipe map[string]any `json:"recipe"`
	}](filepath.Join(out, "metrics.jsonl"))
	if err != nil || len(ms) != 4 {
		t.Fatalf("%d metrics lines, %v", len(ms), err)
	}
	// The same batch in epochs 0 and 1: the second pass starts lower.
	if ms[2].Loss[0] >= ms[0].Loss[0] || ms[0].Recipe["steps"] != 3.0 {
		t.Fatalf("batch 0 loss %v in epoch 0, %v in epoch 1; recipe %v", ms[0].Loss, ms[2].Loss, ms[0].Recipe)
	}
	for _, f := range []string{"model.pt", "optimizer.pt"} {
		if _, err := os.Stat(filepath.Join(out, "adapter", f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(context.Background(), []string{"train", "--mode", "ppo", "--data", "x", "--out", out}, &stdout, &stderr); err == nil ||
		!strings.Contains(err.Error(), "--mode") {
		t.Fatalf("bad mode: %v", err)
	}
}
