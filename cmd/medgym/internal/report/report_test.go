package report

import (
	"math"
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
	if a := r.AtK[0]; a.Tasks != 2 || a.Pass != 0.5 || a.Best != 0.5 {
		t.Fatalf("at k=1: %+v", a)
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
