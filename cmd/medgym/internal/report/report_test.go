package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
)

func TestPassAtK(t *testing.T) {
	for _, c := range []struct {
		n, c, k int
		want    float64
	}{
		{3, 0, 1, 0}, {3, 3, 1, 1}, {3, 1, 1, 1.0 / 3}, {3, 1, 2, 2.0 / 3}, {3, 1, 3, 1},
		{10, 2, 3, 1 - 56.0/120}, // 1 − C(8,3)/C(10,3)
		{200, 1, 4, 0.02},
		{2, 1, 3, 0}, // k > n: undefined, reported as 0 and left out by Build
	} {
		if got := PassAtK(c.n, c.c, c.k); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("PassAtK(%d, %d, %d) = %v, want %v", c.n, c.c, c.k, got, c.want)
		}
	}
}

func TestSelectPrefersExplicitEndThenFewestTurns(t *testing.T) {
	s := []parquet.Row{
		{SampleIndex: 0, Termination: "turn_limit", NumTurns: 1, Outcome: "turn_limit"},
		{SampleIndex: 1, Termination: "answered", NumTurns: 4, Outcome: "incorrect"},
		{SampleIndex: 2, Termination: "accepted", NumTurns: 2, Outcome: "correct"},
		{SampleIndex: 3, Termination: "accepted", NumTurns: 2, Outcome: "incorrect"},
	}
	if got := Select(s).SampleIndex; got != 2 {
		t.Fatalf("picked sample %d, want 2", got)
	}
	if got := Select(s[:1]).SampleIndex; got != 0 {
		t.Fatalf("picked sample %d, want 0", got)
	}
}

func TestBuildExcludesInfraFailures(t *testing.T) {
	rows := []parquet.Row{
		{EpisodeID: "a", TaskID: "t1", Dataset: "d", Category: "c", Outcome: "correct", Termination: "accepted", NumTurns: 1},
		{EpisodeID: "b", TaskID: "t1", Dataset: "d", Category: "c", SampleIndex: 1, Outcome: "infra_failure", Termination: "infra_failure"},
		{EpisodeID: "c", TaskID: "t2", Dataset: "d", Category: "c", Outcome: "incorrect", Termination: "answered", NumTurns: 2},
	}
	r := Build("x", rows, Options{})
	if r.Episodes != 3 || r.Scored != 2 || r.Correct != 1 || r.K != 1 {
		t.Fatalf("episodes %d scored %d correct %d K %d", r.Episodes, r.Scored, r.Correct, r.K)
	}
	if g := r.ByDataset[0]; g.Rate() != 0.5 || g.Episodes != 3 {
		t.Fatalf("dataset group %+v", g)
	}
	if a := r.AtK[0]; a.Tasks != 2 || a.Pass != 0.5 || a.Oracle != 0.5 || a.Best != 0 || r.Verifier != "" {
		t.Fatalf("at k=1: %+v", a)
	}
}

// TestBestAtKByVerifierScores: Best@k follows the verifier's scores. A
// scorer that knows the answers (1 for correct, 0 else) reproduces Pass@k
// at k = n; one that prefers the wrong samples picks them; unscored
// samples come last.
func TestBestAtKByVerifierScores(t *testing.T) {
	var rows []parquet.Row
	oracle, adverse := map[string]float64{}, map[string]float64{}
	for task := range 4 {
		for k := range 3 {
			id := fmt.Sprintf("t%d-%d", task, k)
			out := "incorrect"
			if k == task%3 && task < 3 { // tasks 0..2 have one correct sample; task 3 none
				out = "correct"
			}
			rows = append(rows, parquet.Row{EpisodeID: id, TaskID: fmt.Sprint(task), Dataset: "d", SampleIndex: int32(k),
				Outcome: out, Termination: "answered", NumTurns: 1})
			oracle[id] = map[bool]float64{true: 1, false: 0}[out == "correct"]
			adverse[id] = 1 - oracle[id]
		}
	}
	r := Build("x", rows, Options{Scores: oracle, Verifier: "oracle-scorer"})
	last := r.AtK[len(r.AtK)-1]
	if r.Verifier != "oracle-scorer" || last.K != 3 || last.Best != last.Pass || last.Pass != 0.75 {
		t.Fatalf("an oracle scorer must reproduce Pass@k: %+v", last)
	}
	for _, a := range r.AtK {
		if a.Best+1e-12 < a.Pass-1e-12 && a.K == 3 {
			t.Fatalf("k=%d: Best %v below Pass %v with an oracle scorer", a.K, a.Best, a.Pass)
		}
	}
	if a := Build("x", rows, Options{Scores: adverse}).AtK[2]; a.Best != 0 {
		t.Fatalf("a scorer preferring wrong samples picked a correct one: %+v", a)
	}
	partial := map[string]float64{"t0-1": 0.9} // t0-1 is wrong; every other sample unscored
	rp := Build("x", rows, Options{Scores: partial, Verifier: "v"})
	if rp.Unscored != 11 || SelectByScore(rows[0:3], partial).EpisodeID != "t0-1" {
		t.Fatalf("unscored %d, pick %s", rp.Unscored, SelectByScore(rows[0:3], partial).EpisodeID)
	}
	md := string(Markdown(r))
	if !strings.Contains(md, "| k | tasks | Pass@k | Best@k | Oracle@k |") || !strings.Contains(md, "**oracle-scorer**") {
		t.Fatalf("markdown:\n%s", md)
	}
}

// TestLeaderboard: models × datasets in the paper's Table 3 shape, with the
// in- and out-of-distribution averages, in Markdown and CSV.
func TestLeaderboard(t *testing.T) {
	var rows []parquet.Row
	add := func(run, model, ds string, right, n int) {
		for i := range n {
			out := "incorrect"
			if i < right {
				out = "correct"
			}
			rows = append(rows, parquet.Row{RunID: run, Model: model, Dataset: ds, Outcome: out})
		}
	}
	add("r1", "qwen-7b", "medcalcbench", 1, 4)
	add("r1", "qwen-7b", "mimic_iii", 2, 4)
	add("r2", "qwen-7b", "npowerai", 0, 2)
	add("r3", "gpt", "medcalcbench", 3, 4)
	add("r3", "gpt", "npowerai", 1, 2)
	rows = append(rows, parquet.Row{RunID: "r3", Model: "gpt", Dataset: "mimic_iii", Outcome: "infra_failure"},
		parquet.Row{RunID: "r3", Model: "gpt", Dataset: "mimic_iii", Outcome: "abandoned"})
	b := Leaderboard(rows, DefaultOOD)
	if !slices.Equal(b.Datasets, []string{"medcalcbench", "mimic_iii", "npowerai"}) || len(b.Rows) != 2 {
		t.Fatalf("board %+v", b)
	}
	gpt, qwen := b.Rows[0], b.Rows[1]
	if gpt.Model != "gpt" || gpt.AvgID != 0.75 || gpt.AvgOOD != 0.5 || gpt.Avg != 0.625 || gpt.HaveID != true {
		t.Fatalf("gpt %+v", gpt)
	}
	if _, ok := gpt.Rate["mimic_iii"]; ok {
		t.Fatal("an infra failure or an abandoned episode counted as a scored episode")
	}
	if qwen.AvgID != 0.375 || qwen.AvgOOD != 0 || len(qwen.Runs) != 2 {
		t.Fatalf("qwen %+v", qwen)
	}
	md := b.Markdown()
	if !strings.Contains(md, "| model | medcalcbench | mimic_iii | npowerai (OOD) | avg in-distribution | avg out-of-distribution | avg |") ||
		!strings.Contains(md, "| gpt | 75.00 |  | 50.00 | 75.00 | 50.00 | 62.50 |") {
		t.Fatalf("markdown:\n%s", md)
	}
	c, err := b.CSV()
	if err != nil || !strings.Contains(string(c), "qwen-7b,25.00,50.00,0.00,37.50,0.00,25.00") {
		t.Fatalf("csv %v:\n%s", err, c)
	}
}

// The reliability score of EHRSQL 2024: 10 scored episodes of ehrsql2024
// (4 correct answers, 2 correct abstentions, 1 wrong abstention, 2 wrong
// answers, 1 turn limit) plus one infra failure, next to a dataset without
// abstention that is left out of the section.
func TestBuildReliabilityScore(t *testing.T) {
	var rows []parquet.Row
	add := func(ds, outcome string, n int) {
		for range n {
			rows = append(rows, parquet.Row{EpisodeID: ds + outcome + string(rune('a'+len(rows))), TaskID: "t" + string(rune('a'+len(rows))),
				Dataset: ds, Outcome: outcome, Termination: "answered", NumTurns: 1})
		}
	}
	add("ehrsql2024", "correct", 4)
	add("ehrsql2024", "abstained_correctly", 2)
	add("ehrsql2024", "abstained_wrongly", 1)
	add("ehrsql2024", "incorrect", 2)
	add("ehrsql2024", "turn_limit", 1)
	add("ehrsql2024", "infra_failure", 1)
	add("medcalcbench", "incorrect", 3)
	r := Build("x", rows, Options{Abstention: []string{"ehrsql2024"}})
	if len(r.Reliability) != 1 {
		t.Fatalf("reliability rows %+v, want ehrsql2024 only", r.Reliability)
	}
	x := r.Reliability[0]
	if x.Scored != 10 || x.Solved != 6 || x.Abstained != 1 || x.Wrong != 3 {
		t.Fatalf("reliability %+v", x)
	}
	for c, want := range map[float64]float64{0: 0.6, 5: (6 - 15) / 10.0, 10: (6 - 30) / 10.0} {
		if got := x.RS(c); math.Abs(got-want) > 1e-12 {
			t.Errorf("RS(%v) = %v, want %v", c, got, want)
		}
	}
	if got := x.RS(float64(x.Scored)); math.Abs(got-(6-30)/10.0) > 1e-12 {
		t.Errorf("RS(N) = %v", got)
	}
	if g := r.ByDataset[0]; g.Name != "ehrsql2024" || g.Correct != 6 || g.Rate() != 0.6 {
		t.Fatalf("success counts correct abstentions: %+v", g)
	}
	md := string(Markdown(r))
	if !strings.Contains(md, "| ehrsql2024 | 10 | 6 | 1 | 3 | 60.0% | 0.600 | -0.900 | -2.400 | -2.400 |") {
		t.Fatalf("report table missing or wrong:\n%s", md)
	}
	// Without the option, a dataset shows up once it has an abstention.
	if r := Build("x", rows, Options{}); len(r.Reliability) != 1 {
		t.Fatalf("reliability rows %+v without the option", r.Reliability)
	}
	if r := Build("x", rows[len(rows)-3:], Options{}); len(r.Reliability) != 0 {
		t.Fatalf("a dataset without abstention got a reliability row: %+v", r.Reliability)
	}
}
