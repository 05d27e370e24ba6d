package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTrainStepLosses runs python/train_step.py on the toy batches in
// testdata with the CPU backend and checks that each loss does its job.
func TestTrainStepLosses(t *testing.T) {
	if exec.Command("/usr/bin/python3", "-c", "import torch").Run() != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("/usr/bin/python3 lacks torch (apt-get install python3-torch; scripts/setup.sh does)")
		}
		t.Skip("/usr/bin/python3 lacks torch")
	}
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
			cmd := exec.Command("/usr/bin/python3", "python/train_step.py", "--mode", mode, "--backend", "tiny",
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
