package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Chart file names, relative to the report directory.
const (
	FileMarkdown        = "report.md"
	FileSuccessDataset  = "success_by_dataset.svg"
	FileSuccessCategory = "success_by_category.svg"
	FileAtK             = "pass_best_at_k.svg"
	FileTurns           = "turns.svg"
	FileActions         = "actions.svg"
	FileOutcomes        = "outcomes.svg"
)

// Percent formats a rate in [0, 1] the way the report prints it.
func Percent(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// Write writes report.md and its SVG charts into dir (created if missing)
// and returns the paths written.
func Write(dir string, r Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report dir: %w", err)
	}
	files := map[string][]byte{}
	pct := func(v float64) string { return Percent(v) }
	count := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	rates := func(gs []Group) ([]string, []float64) {
		var l []string
		var v []float64
		for _, g := range gs {
			l, v = append(l, g.Name), append(v, g.Rate())
		}
		return l, v
	}
	counts := func(cs []Count) ([]string, []float64, float64) {
		var l []string
		var v []float64
		m := 0.0
		for _, c := range cs {
			l, v = append(l, c.Name), append(v, float64(c.N))
			m = max(m, float64(c.N))
		}
		return l, v, niceMax(m)
	}
	l, v := rates(r.ByDataset)
	files[FileSuccessDataset] = barChart("Success rate per dataset (infra failures excluded)", "success rate", l, v, 1, pct)
	l, v = rates(r.ByCategory)
	files[FileSuccessCategory] = barChart("Success rate per category (infra failures excluded)", "success rate", l, v, 1, pct)
	var pass, best, oracle []float64
	for _, a := range r.AtK {
		pass, best, oracle = append(pass, a.Pass), append(best, a.Best), append(oracle, a.Oracle)
	}
	ss := []series{{"Pass@k", pass}, {"Oracle@k", oracle}}
	if r.Verifier != "" {
		ss = append(ss, series{"Best@k", best})
	}
	files[FileAtK] = lineChart(fmt.Sprintf("Pass@k and Best@k, K = %d", r.K), "k (samples)", "share of tasks", ss)
	l, v, m := counts(r.Turns)
	files[FileTurns] = barChart("Turns per episode", "episodes", l, v, m, count)
	l, v, m = counts(r.Actions)
	files[FileActions] = barChart("Action mix (all turns)", "turns", l, v, m, count)
	l, v, m = counts(r.Outcomes)
	files[FileOutcomes] = barChart("Outcomes (all episodes)", "episodes", l, v, m, count)
	files[FileMarkdown] = Markdown(r)

	var paths []string
	for _, name := range []string{FileMarkdown, FileSuccessDataset, FileSuccessCategory, FileAtK, FileTurns, FileActions, FileOutcomes} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return paths, fmt.Errorf("write report: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// niceMax rounds m up to 1, 2 or 5 times a power of ten, so axis ticks read well.
func niceMax(m float64) float64 {
	if m <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= m {
		p *= 10
	}
	for _, f := range []float64{1, 2, 5, 10} {
		if f*p >= m {
			return f * p
		}
	}
	return 10 * p
}

// Markdown renders the report; the charts are linked by their file names.
func Markdown(r Report) []byte {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# Run %s\n\n", r.RunID)
	p("%d episodes over %d tasks (K = %d samples per task at most); %d scored (infra failures excluded), %d correct: success rate %s.\n\n",
		r.Episodes, r.Tasks, r.K, r.Scored, r.Correct, Percent(ratio(r.Correct, r.Scored)))

	p("## Success rate per dataset\n\n")
	groupTable(&b, "dataset", r.ByDataset)
	p("\n![success rate per dataset](%s)\n\n", FileSuccessDataset)
	if len(r.Baselines) > 0 {
		baselineTable(&b, r)
	}
	p("## Success rate per category\n\n")
	groupTable(&b, "category", r.ByCategory)
	p("\n![success rate per category](%s)\n\n", FileSuccessCategory)

	if len(r.Reliability) > 0 {
		p("## Reliability score (EHRSQL 2024)\n\n")
		p("For the datasets that offer abstention: +1 for a correct answer or a correct abstention, 0 for an abstention on ")
		p("an answerable question, −1 × c for anything else (a wrong answer, an answer to an unanswerable question, no answer); ")
		p("RS(c) is the mean over the scored episodes, N their number (Lee et al. 2024).\n\n")
		p("| dataset | scored | +1 | 0 | −1 | success | RS(0) | RS(5) | RS(10) | RS(N) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range r.Reliability {
			p("| %s | %d | %d | %d | %d | %s |", x.Dataset, x.Scored, x.Solved, x.Abstained, x.Wrong, Percent(ratio(x.Solved, x.Scored)))
			for _, c := range RSPenalties {
				p(" %.3f |", x.RS(c))
			}
			p(" %.3f |\n", x.RS(float64(x.Scored)))
		}
		p("\n")
	}

	p("## Pass@k and Best@k\n\n")
	p("Pass@k: the unbiased estimator 1 − C(n−c,k)/C(n,k) per task (n scored samples, c correct), averaged over the tasks with n ≥ k. ")
	if r.Verifier != "" {
		p("Best@k: the share of those tasks whose sample chosen among the first k by the trajectory verifier **%s** (highest score) is correct", r.Verifier)
		if r.Unscored > 0 {
			p(" (%d episodes had no score and are chosen last)", r.Unscored)
		}
		p(". ")
	} else {
		p("Best@k needs a trajectory verifier's scores (`medgym report --scores FILE`, from `trainer score`); this report has none. ")
	}
	p("Oracle@k is not Best@k: its pick is the sample that ended with an accepted run or an explicit answer, with the fewest turns ")
	p("(else the fewest turns; ties: lower sample index); an accepted run is the ground-truth check's verdict, so it uses the answer key and follows Pass@k.\n\n")
	if r.Verifier != "" {
		p("| k | tasks | Pass@k | Best@k | Oracle@k |\n|---:|---:|---:|---:|---:|\n")
		for _, a := range r.AtK {
			p("| %d | %d | %.3f | %.3f | %.3f |\n", a.K, a.Tasks, a.Pass, a.Best, a.Oracle)
		}
	} else {
		p("| k | tasks | Pass@k | Oracle@k |\n|---:|---:|---:|---:|\n")
		for _, a := range r.AtK {
			p("| %d | %d | %.3f | %.3f |\n", a.K, a.Tasks, a.Pass, a.Oracle)
		}
	}
	p("\n![Pass@k and Best@k](%s)\n\n", FileAtK)

	p("## Turns per episode\n\n| turns | episodes |\n|---:|---:|\n")
	for _, c := range r.Turns {
		p("| %s | %d |\n", c.Name, c.N)
	}
	p("\n![turns per episode](%s)\n\n", FileTurns)

	p("## Action mix\n\nEvery turn of every episode, by action; parse_error is a reply that did not parse as an action.\n\n")
	p("| action | turns |\n|---|---:|\n")
	for _, c := range r.Actions {
		p("| %s | %d |\n", c.Name, c.N)
	}
	p("\n![action mix](%s)\n\n", FileActions)

	t := r.Tokens
	p("## Tokens and cost\n\n| | prompt | completion | total |\n|---|---:|---:|---:|\n")
	p("| tokens | %d | %d | %d |\n", t.Prompt, t.Completion, t.Prompt+t.Completion)
	p("| per episode (mean) | %.1f | %.1f | %.1f |\n", mean(t.Prompt, r.Episodes), mean(t.Completion, r.Episodes), mean(t.Prompt+t.Completion, r.Episodes))
	p("\nCost: $%.4f at $%g per 1M prompt tokens and $%g per 1M completion tokens.\n\n", t.Cost(), t.PriceIn, t.PriceOut)

	p("## Outcomes\n\nAll episodes; infra_failure is never the model's fault and is excluded from the success rates above.\n\n")
	p("| outcome | episodes | share |\n|---|---:|---:|\n")
	for _, c := range r.Outcomes {
		p("| %s | %d | %s |\n", c.Name, c.N, Percent(ratio(c.N, r.Episodes)))
	}
	p("\n![outcomes](%s)\n", FileOutcomes)
	return b.Bytes()
}

func groupTable(b *bytes.Buffer, what string, gs []Group) {
	fmt.Fprintf(b, "| %s | episodes | scored | correct | success |\n|---|---:|---:|---:|---:|\n", what)
	for _, g := range gs {
		fmt.Fprintf(b, "| %s | %d | %d | %d | %s |\n", g.Name, g.Episodes, g.Scored, g.Correct, Percent(g.Rate()))
	}
}

// baselineTable prints each dataset's best constant answer beside the
// model's success.
func baselineTable(b *bytes.Buffer, r Report) {
	fmt.Fprintf(b, "### Constant-answer baseline\n\n")
	fmt.Fprintf(b, "The one answer that, given to every task of the run, the most tasks accept (the verifier's rule over the truths of the ")
	fmt.Fprintf(b, "library's verifier tree; candidates: the %d most frequent truths, and the abstention answer where it counts). ", MaxCandidates)
	fmt.Fprintf(b, "A success near it says the model learned the answer distribution, not the task.\n\n")
	fmt.Fprintf(b, "| dataset | model success | best constant answer | tasks | its success |\n|---|---:|---|---:|---:|\n")
	model := map[string]Group{}
	for _, g := range r.ByDataset {
		model[g.Name] = g
	}
	for _, x := range r.Baselines {
		m := "–"
		if g, ok := model[x.Dataset]; ok {
			m = Percent(g.Rate())
		}
		if x.Note != "" {
			fmt.Fprintf(b, "| %s | %s | %s | %d | – |\n", x.Dataset, m, x.Note, x.Tasks)
			continue
		}
		fmt.Fprintf(b, "| %s | %s | `%s` | %d | %s |\n", x.Dataset, m, clipAnswer(x.Answer), x.Tasks, Percent(x.Rate()))
	}
	fmt.Fprintf(b, "\n")
}

// clipAnswer keeps a constant printable in a table cell.
func clipAnswer(a string) string {
	a = strings.NewReplacer("|", `\|`, "`", "'", "\n", " ").Replace(a)
	if r := []rune(a); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return a
}

func mean(total int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(total) / float64(n)
}
