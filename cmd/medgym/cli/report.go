package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/medgym/medgym/cmd/medgym/internal/report"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// cmdReport writes the Markdown report and SVG charts of one stored run.
func cmdReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeURL := fs.String("store", "runs", "trajectory store: a directory or s3://bucket/prefix")
	s3Endpoint := fs.String("s3-endpoint", "", "S3 endpoint host:port (default $AWS_ENDPOINT_URL)")
	runID := fs.String("run", "", "run id (required)")
	out := fs.String("out", "", "output directory (default report-<run id>)")
	priceIn := fs.Float64("price-in", 0, "USD per 1M prompt tokens")
	priceOut := fs.Float64("price-out", 0, "USD per 1M completion tokens")
	scoresPath := fs.String("scores", "", "trajectory-verifier scores (JSONL from trainer score) for Best@k")
	board := fs.Bool("leaderboard", false, "a leaderboard over several runs (--run a,b,...; default every run): models × datasets, averages in and out of distribution, as leaderboard.md and leaderboard.csv")
	ood := fs.String("ood", strings.Join(report.DefaultOOD, ","), "datasets out of distribution (leaderboard)")
	library := fs.String("library", tasks.LibraryDir(), "generated task library, whose verifier tree's truths give each dataset's best constant answer")
	data := fs.String("data", tasks.DataRoot(), "shared data root (datasets read from it, not from the library)")
	noBaseline := fs.Bool("no-baseline", false, "leave out the constant-answer baselines (no task library at hand)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *board {
		return leaderboard(ctx, *storeURL, *s3Endpoint, *runID, *out, *ood, stdout)
	}
	if *runID == "" {
		return errors.New("report: --run is required (list runs with: medgym query --store DIR \"SELECT DISTINCT run_id FROM trajectories\")")
	}
	if *priceIn < 0 || *priceOut < 0 {
		return errors.New("report: --price-in and --price-out must not be negative")
	}
	if *out == "" {
		*out = "report-" + *runID
	}
	st, err := store.Open(ctx, *storeURL, store.Options{Endpoint: *s3Endpoint})
	if err != nil {
		return err
	}
	rows, err := st.ReadRun(ctx, *runID)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("report: store %s holds no episodes of run %s", st, *runID)
	}
	opt := report.Options{PriceIn: *priceIn, PriceOut: *priceOut, Abstention: []string{tasks.EHRSQL2024Dataset}}
	if *scoresPath != "" {
		if opt.Scores, opt.Verifier, err = readScores(*scoresPath, *runID); err != nil {
			return err
		}
	}
	if !*noBaseline {
		opt.Baselines = constantBaselines(ctx, tasks.NewCache(*data, "", *library), rows)
	}
	r := report.Build(*runID, rows, opt)
	paths, err := report.Write(*out, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "run %s: %d episodes, success %s; wrote %s and %d charts\n",
		*runID, r.Episodes, scoredRate(r.Correct, r.Scored, r.Episodes-r.Scored), paths[0], len(paths)-1)
	return nil
}

// readScores reads trainer score's JSONL ({"run_id", "episode_id",
// "score", "verifier"} per line) and keeps the scores of run runID; it
// returns them by episode id, with the verifier's name.
func readScores(path, runID string) (map[string]float64, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("report: scores: %w", err)
	}
	scores := map[string]float64{}
	verifier := ""
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var s struct {
			RunID     string   `json:"run_id"`
			EpisodeID string   `json:"episode_id"`
			Score     *float64 `json:"score"`
			Verifier  string   `json:"verifier"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return nil, "", fmt.Errorf("report: scores %s line %d: %w", path, i+1, err)
		}
		if s.RunID != runID || s.Score == nil {
			continue
		}
		if verifier != "" && s.Verifier != verifier {
			return nil, "", fmt.Errorf("report: scores %s mix verifiers %q and %q", path, verifier, s.Verifier)
		}
		verifier = s.Verifier
		scores[s.EpisodeID] = *s.Score
	}
	if len(scores) == 0 {
		return nil, "", fmt.Errorf("report: scores %s hold no score of run %s", path, runID)
	}
	return scores, verifier, nil
}

// leaderboard writes the leaderboard of runs (comma-separated; "" for
// every run in the store) to out (default "leaderboard").
func leaderboard(ctx context.Context, storeURL, endpoint, runs, out, ood string, stdout io.Writer) error {
	st, err := store.Open(ctx, storeURL, store.Options{Endpoint: endpoint})
	if err != nil {
		return err
	}
	ids := strings.FieldsFunc(runs, func(r rune) bool { return r == ',' })
	if len(ids) == 0 {
		if ids, err = st.Runs(ctx); err != nil {
			return err
		}
	}
	var rows []parquet.Row
	for _, id := range ids {
		rs, err := st.ReadRun(ctx, id)
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	if len(rows) == 0 {
		return fmt.Errorf("report: no episodes in runs %v of %s", ids, st)
	}
	b := report.Leaderboard(rows, strings.FieldsFunc(ood, func(r rune) bool { return r == ',' }))
	if out == "" {
		out = "leaderboard"
	}
	c, err := b.CSV()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	md := filepath.Join(out, "leaderboard.md")
	for path, data := range map[string][]byte{md: []byte(b.Markdown()), filepath.Join(out, "leaderboard.csv"): c} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	fmt.Fprintf(stdout, "leaderboard of %d models over %d runs: %s (and leaderboard.csv)\n", len(b.Rows), len(ids), md)
	return nil
}

// constantBaselines is each dataset's best constant answer over the run's
// distinct tasks (report.BestConstant), under the verifier rules the run was
// scored with; a success counts as the run's does (an abstention only on an
// unanswerable question). A dataset whose truths cannot be read, or whose
// tasks take no answer text, gets a note instead.
func constantBaselines(ctx context.Context, lib *tasks.Cache, rows []parquet.Row) []report.Baseline {
	type key struct{ split, id string }
	byDS := map[string]map[key]bool{}
	mode := verify.Strict
	for _, r := range rows {
		if byDS[r.Dataset] == nil {
			byDS[r.Dataset] = map[key]bool{}
		}
		byDS[r.Dataset][key{r.Split, r.TaskID}] = true
		if strings.Contains(r.VerifierVersion, "+"+string(verify.Upstream)) {
			mode = verify.Upstream
		}
	}
	var out []report.Baseline
	for _, ds := range slices.Sorted(maps.Keys(byDS)) {
		var truths []tasks.Truth
		var answers []string
		note, abstain := "", false
		for _, k := range slices.SortedFunc(maps.Keys(byDS[ds]), func(a, b key) int { return cmp.Or(cmp.Compare(a.split, b.split), cmp.Compare(a.id, b.id)) }) {
			t, err := lib.Task(ctx, ds, k.split, k.id)
			if err != nil {
				note = "no truths in the library"
				break
			}
			if t.Truth.Type == schemas.AnswerPredictions || t.Truth.Type == schemas.AnswerOutput {
				note = "scored from files or program output: no constant answer"
				break
			}
			truths, answers = append(truths, t.Truth), append(answers, t.Truth.Answer)
			abstain = abstain || t.Truth.Abstention
		}
		if note != "" {
			out = append(out, report.Baseline{Dataset: ds, Tasks: len(byDS[ds]), Note: note})
			continue
		}
		var extra []string
		if abstain {
			extra = []string{schemas.AbstainAnswer}
		}
		out = append(out, report.BestConstant(ds, answers, extra, func(i int, a string) bool {
			t := truths[i]
			if t.Abstention && !t.Unanswerable && verify.IsAbstention(a) {
				return false // accepted as final, scored abstained_wrongly: not a success
			}
			return verify.CheckAnswer(mode, ds, t, a).Accepted
		}))
	}
	return out
}
