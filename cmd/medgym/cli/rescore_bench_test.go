package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/verifier/replay"
	"github.com/medgym/medgym/services/verifier/verifier"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// BenchmarkRescore stores a run of MEDGYM_BENCH_RESCORE_ROWS episodes
// (default 1,000,000; medcalcbench tasks, each row with its prompt, two
// turns and an answer, two in three correct, scored as the verifier scores
// them) in a directory store, then re-scores it as `medgym rescore` does:
// under the labels it was scored with (no change may appear), and under
// MedCalc-Bench's own labels (the corrected rows flip). It reports rows/s
// of each. Then it checks, on a sample of 1,000 episodes, that the
// re-score from the scoring columns is bit-identical to the re-score of
// the whole rows, and that the recorded scores (the live verifier's) are
// what it computes.
func BenchmarkRescore(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("MEDGYM_BENCH_RESCORE_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("MEDGYM_BENCH_RESCORE_ROWS=%q: want a number >= 1000", v)
		}
	}
	ctx := context.Background()
	data := tasks.DataRoot()
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: tasks.MedCalcDataset, Split: "test", DataRoot: data})
	if err != nil {
		b.Skipf("no MedCalc-Bench data: %v", err)
	}
	dir := b.TempDir()
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := writeScoredRun(ctx, st, "bench", ts, n); err != nil {
		b.Fatal(err)
	}
	b.Logf("stored %d episodes in %s", n, time.Since(t0).Round(time.Millisecond))
	opt := replay.Options{Tasks: tasks.NewCache(data, "", ""), Concurrency: 2}
	v1 := opt
	v1.LabelSets = []string{tasks.MedCalcDataset + "@v1.0"}

	var same, under replay.Report
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if same, err = rescoreRun(ctx, st, "bench", nil, false, opt); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "rows/s")
		start = time.Now()
		if under, err = rescoreRun(ctx, st, "bench", nil, false, v1); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "labels-rows/s")
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "rows")
	if len(same.Episodes) != n || len(same.Changes()) != 0 {
		b.Fatalf("re-score under the recorded labels: %d episodes, %d changes (want %d, 0)", len(same.Episodes), len(same.Changes()), n)
	}
	flips := replay.FlipsOf(under)
	if flips.Up+flips.Down == 0 {
		b.Fatal("re-score under medcalcbench@v1.0 flipped nothing")
	}
	b.ReportMetric(float64(flips.Up+flips.Down), "flips")

	// Bit-identical on a sample: the columnar re-score against whole rows.
	var sample []parquet.Row
	err = st.ScanRun(ctx, "bench", nil, func(rows []parquet.Row) error {
		for i := 0; i < len(rows) && len(sample) < 1000; i += max(1, n/1000) {
			sample = append(sample, rows[i])
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	whole, err := replay.Run(ctx, "bench", sample, v1)
	if err != nil {
		b.Fatal(err)
	}
	byID := map[string]replay.Episode{}
	for _, e := range under.Episodes {
		byID[e.Recorded.EpisodeID] = e
	}
	for _, w := range whole.Episodes {
		c := byID[w.Recorded.EpisodeID]
		if c.Rescored.Outcome != w.Rescored.Outcome || c.Rescored.Reward != w.Rescored.Reward ||
			c.Rescored.LabelSet != w.Rescored.LabelSet || c.Verdict != w.Verdict {
			b.Fatalf("%s: columnar %s %v %s %q, whole rows %s %v %s %q", w.Recorded.EpisodeID, c.Rescored.Outcome, c.Rescored.Reward,
				c.Rescored.LabelSet, c.Verdict, w.Rescored.Outcome, w.Rescored.Reward, w.Rescored.LabelSet, w.Verdict)
		}
	}
}

// writeScoredRun stores n episodes of run over ts, scored as the verifier
// scores them under the strict rules and the default labels.
func writeScoredRun(ctx context.Context, st *store.Store, run string, ts []tasks.Task, n int) error {
	const batch = 10_000
	sys := "You are a biomedical data scientist. Solve the task with Python; reply with one JSON action per turn."
	vopt := verifier.Scoring{}.Options(verify.Strict)
	rows := make([]parquet.Row, 0, batch)
	now := time.Now().UTC()
	for i := range n {
		t := ts[i%len(ts)]
		answer := t.Truth.Answer
		if i%3 == 2 {
			answer = "0"
		}
		code := fmt.Sprintf(`{"code":"print(%q)"}`, answer)
		turns := []schemas.Turn{
			{Index: 0, RawText: `{"action":"validate_code","params":` + code + `}`, ActionName: schemas.ActionValidateCode, ParamsJSON: code,
				Observation: answer, ExecStatus: schemas.StatusOK, Stdout: answer + "\n", StdoutBytes: int64(len(answer) + 1)},
			{Index: 1, RawText: `{"action":"answer","params":{"answer":"` + answer + `"}}`, ActionName: schemas.ActionAnswer,
				ParamsJSON: `{"answer":"` + answer + `"}`},
		}
		req := schemas.EpisodeRequest{RunID: run, EpisodeID: fmt.Sprintf("%s-e%07d", run, i), Task: t.View,
			Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "bench"}, Options: schemas.DefaultOptions()}
		res := schemas.EpisodeResult{Request: req, Turns: turns, FinalAnswer: answer, Termination: schemas.EndAnswered,
			StartedAt: now, FinishedAt: now,
			Messages: []schemas.ChatMessage{{Role: "system", Content: sys}, {Role: "user", Content: t.View.Context + "\n" + t.View.Instruction},
				{Role: "assistant", Content: turns[0].RawText}, {Role: "user", Content: answer}, {Role: "assistant", Content: turns[1].RawText}}}
		outcome, reward, _ := verify.Score(vopt, t.Truth, res)
		sc := schemas.Score{RunID: run, EpisodeID: req.EpisodeID, Outcome: outcome, Reward: reward,
			VerifierVersion: verify.VersionFor(verify.Strict), LabelSet: t.Truth.LabelSet}
		rows = append(rows, parquet.FromEpisode(res, sc, string(verify.Strict), schemas.TreeHashes{}))
		if len(rows) == batch || i == n-1 {
			if _, err := st.Write(ctx, rows); err != nil {
				return err
			}
			rows = rows[:0]
		}
	}
	return nil
}
