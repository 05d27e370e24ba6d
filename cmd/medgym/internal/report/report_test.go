package report

import (
	"math"
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
