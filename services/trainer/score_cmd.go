package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/medgym/medgym/services/trainer/train"
	"github.com/medgym/medgym/services/trainer/worker"
	"github.com/medgym/medgym/store"
)

// Score is one line of trainer score's output, read by medgym report
// --scores.
type Score struct {
	RunID     string   `json:"run_id"`
	EpisodeID string   `json:"episode_id"`
	TaskID    string   `json:"task_id"`
	Score     *float64 `json:"score"`
	Verifier  string   `json:"verifier"`
}

// cmdScore runs a trajectory verifier (an adapter trained with trainer
// train --mode sft on trainer build's verifier/ export) over the episodes
// of runs, in batch through one resident worker, and writes a score per
// episode: P(YES) that the episode solved its task.
func cmdScore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("score", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f train.Filter
	storeURL := fs.String("store", "", "trajectory store: a directory or s3://bucket/prefix")
	fs.Var((*listFlag)(&f.Runs), "run", "run id (repeatable; required)")
	adapter := fs.String("adapter", "", "the verifier adapter (trainer train's OUT/adapter)")
	name := fs.String("name", "", "the verifier's name in the scores (default: the adapter directory's name and the model)")
	out := fs.String("out", "", "scores JSONL")
	py := fs.String("python", defaultPython(), "Python interpreter with torch (transformers and peft for hf)")
	script := fs.String("worker", "services/trainer/python/worker.py", "the worker script")
	backend := fs.String("backend", "hf", "hf (LoRA on --model) or tiny (the CPU test model)")
	model := fs.String("model", "", "Hugging Face model id or path (hf)")
	maxLen := fs.Int("max-len", 0, "tokens per trajectory (0: the worker's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *storeURL == "" || len(f.Runs) == 0 || *adapter == "" || *out == "" {
		return errors.New("score: --store, --run, --adapter and --out are required")
	}
	if *backend == "hf" && *model == "" {
		return errors.New("score: --backend hf needs --model")
	}
	if *name == "" {
		*name = filepath.Base(filepath.Clean(*adapter))
		if *model != "" {
			*name += " on " + *model
		}
	}
	st, err := store.Open(ctx, *storeURL, store.Options{})
	if err != nil {
		return err
	}
	rows, _, _, err := train.Load(ctx, st, f)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("score: no episodes in runs %v", f.Runs)
	}
	recs := make([]train.VerifierRecord, len(rows))
	for i := range rows {
		recs[i] = train.VerifierInput(train.NewEpisode(&rows[i], train.ObsSampled))
	}
	tmp, err := os.MkdirTemp("", "medgym-score-")
	if err != nil {
		return fmt.Errorf("score: %w", err)
	}
	defer os.RemoveAll(tmp)
	in, raw := filepath.Join(tmp, "in.jsonl"), filepath.Join(tmp, "scores.jsonl")
	if _, err := train.WriteJSONL(in, recs); err != nil {
		return err
	}
	cmd := []string{*py, *script, "--backend", *backend}
	if *model != "" {
		cmd = append(cmd, "--model", *model)
	}
	sup := &worker.Supervisor{Command: cmd, Init: *adapter, Log: slog.New(slog.NewTextHandler(stderr, nil))}
	defer sup.Close()
	p, err := sup.Process(ctx)
	if err != nil {
		return err
	}
	res, err := p.Score(ctx, in, raw, *maxLen)
	if err != nil {
		return err
	}
	got, err := train.ReadJSONL[struct {
		Index int      `json:"index"`
		Score *float64 `json:"score"`
	}](raw)
	if err != nil {
		return err
	}
	if len(got) != len(rows) {
		return fmt.Errorf("score: %d scores for %d episodes", len(got), len(rows))
	}
	scores := make([]Score, len(rows))
	for _, g := range got {
		r := rows[g.Index]
		scores[g.Index] = Score{RunID: r.RunID, EpisodeID: r.EpisodeID, TaskID: r.TaskID, Score: g.Score, Verifier: *name}
	}
	if _, err := train.WriteJSONL(*out, scores); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "scored %d episodes (%d too long to score) with %s in %.1fs; written to %s\n",
		res.Scored, res.Unscored, *name, res.ScoreS, *out)
	return nil
}
