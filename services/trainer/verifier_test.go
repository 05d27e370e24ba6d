package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/train"
	"github.com/medgym/medgym/store"
)

// verifierRows makes K samples of each of n tasks in run: two turns each,
// the first action's observation a plausible value when the episode is
// correct and a traceback when it is not (the learnable signal), with
// random task text so the rest is noise.
func verifierRows(rng *rand.Rand, run string, first, n, k int) []parquet.Row {
	var rows []parquet.Row
	for task := first; task < first+n; task++ {
		for s := range k {
			correct := rng.IntN(2) == 0
			obs := fmt.Sprintf("Traceback (most recent call last): ZeroDivisionError at line %d", rng.IntN(90)+10)
			outcome, reward := "incorrect", 0.0
			if correct {
				obs, outcome, reward = fmt.Sprintf("%d.%d", rng.IntN(90)+10, rng.IntN(10)), "correct", 1
			}
			q := fmt.Sprintf("Task %d: compute score %d for patient %d.", task, rng.IntN(1000), rng.IntN(1000))
			code := fmt.Sprintf(`{"action": "validate_code", "params": {"code": "answer = %d / x"}}`, rng.IntN(100))
			rows = append(rows, parquet.Row{RunID: run, EpisodeID: fmt.Sprintf("%s-%d-%d", run, task, s), TaskID: fmt.Sprint(task),
				Dataset: "medcalcbench", Split: "train", SampleIndex: int32(s), Model: "m", Outcome: outcome, Reward: reward,
				Termination: "turn_limit", NumTurns: 2, SchemaVersion: parquet.SchemaVersion,
				Messages: []parquet.Message{{Role: "system", Content: "Solve it."}, {Role: "user", Content: q},
					{Role: "assistant", Content: code}, {Role: "user", Content: obs}, {Role: "assistant", Content: "done"}},
				Turns: []parquet.Turn{{Index: 0, RawText: code, Action: "validate_code", Observation: obs},
					{Index: 1, RawText: "done", ParseError: "not JSON"}}})
		}
	}
	return rows
}

// TestVerifierBestAtK trains a trajectory verifier through the same
// training step (trainer train on trainer build's verifier export, tiny
// backend), scores held-out tasks' episodes with trainer score, and picks
// the best of K by score: on data whose correct episodes differ visibly
// from the wrong ones, Best@K beats random selection; Best@K can never
// beat Pass@K (what an oracle scorer reaches; report_test checks that).
func TestVerifierBestAtK(t *testing.T) {
	py := python(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "store"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const k = 4
	for _, rows := range [][]parquet.Row{verifierRows(rng, "train", 0, 30, k), verifierRows(rng, "heldout", 100, 20, k)} {
		if _, err := st.Write(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	res, err := train.Build(ctx, st, "test", train.Filter{Runs: []string{"train"}}, train.Options{Seed: 3}, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Verifier) < 80 {
		t.Fatalf("%d verifier records", len(res.Verifier))
	}
	var out bytes.Buffer
	model := filepath.Join(dir, "verifier")
	if err := run(ctx, []string{"train", "--mode", "sft", "--data", filepath.Join(data, "verifier/verifier.jsonl"), "--out", model,
		"--python", py, "--worker", "python/worker.py", "--backend", "tiny", "--batch-size", "32", "--epochs", "2", "--steps", "4"},
		&out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	scoresPath := filepath.Join(dir, "scores.jsonl")
	if err := run(ctx, []string{"score", "--store", filepath.Join(dir, "store"), "--run", "heldout", "--adapter",
		filepath.Join(model, "adapter"), "--out", scoresPath, "--python", py, "--worker", "python/worker.py", "--backend", "tiny"},
		&out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	scores, err := train.ReadJSONL[Score](scoresPath)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.ReadRun(ctx, "heldout")
	if err != nil || len(scores) != len(rows) {
		t.Fatalf("%d scores for %d rows: %v", len(scores), len(rows), err)
	}
	byEp := map[string]float64{}
	for _, s := range scores {
		if s.Score == nil || s.Verifier != "adapter" || s.RunID != "heldout" {
			t.Fatalf("score %+v", s)
		}
		byEp[s.EpisodeID] = *s.Score
	}
	type agg struct {
		best      float64
		bestOK    bool
		ok, total int
	}
	tasks := map[string]*agg{}
	for _, r := range rows {
		a := tasks[r.TaskID]
		if a == nil {
			a = &agg{best: -1}
			tasks[r.TaskID] = a
		}
		a.total++
		if r.Outcome == "correct" {
			a.ok++
		}
		if sc := byEp[r.EpisodeID]; sc > a.best {
			a.best, a.bestOK = sc, r.Outcome == "correct"
		}
	}
	var best, random, pass float64
	for _, a := range tasks {
		if a.bestOK {
			best++
		}
		random += float64(a.ok) / float64(a.total)
		if a.ok > 0 {
			pass++
		}
	}
	n := float64(len(tasks))
	best, random, pass = best/n, random/n, pass/n
	t.Logf("held-out tasks %d: Best@%d %.3f, random %.3f, Pass@%d %.3f\n%s", len(tasks), k, best, random, k, pass, out.String())
	if best < random+0.15 || best > pass {
		t.Fatalf("Best@%d %.3f should beat random selection %.3f (and never Pass@%d %.3f)", k, best, random, k, pass)
	}
}
