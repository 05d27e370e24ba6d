package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

func mkTasks(n int) []tasks.Task {
	ts := make([]tasks.Task, n)
	for i := range ts {
		ts[i].View = schemas.TaskView{ID: fmt.Sprintf("ds-%d", i), Dataset: "ds", Category: fmt.Sprintf("c%d", i%3), Question: "q"}
	}
	return ts
}

func TestSelectFiltersAndSamples(t *testing.T) {
	t.Parallel()
	ts := mkTasks(30)
	got := Select(schemas.RunSpec{Categories: []string{"c1"}}, ts)
	if len(got) != 10 {
		t.Fatalf("category filter kept %d, want 10", len(got))
	}
	for _, x := range got {
		if x.View.Category != "c1" {
			t.Fatalf("kept %s of category %s", x.View.ID, x.View.Category)
		}
	}
	first := Select(schemas.RunSpec{Limit: 5}, ts)
	if first[0].View.ID != "ds-0" || first[4].View.ID != "ds-4" {
		t.Fatalf("limit without seed should keep the first tasks, got %s..%s", first[0].View.ID, first[4].View.ID)
	}
	a := Select(schemas.RunSpec{Limit: 5, SampleSeed: 7}, ts)
	b := Select(schemas.RunSpec{Limit: 5, SampleSeed: 7}, ts)
	c := Select(schemas.RunSpec{Limit: 5, SampleSeed: 8}, ts)
	same := func(x, y []tasks.Task) bool {
		for i := range x {
			if x[i].View.ID != y[i].View.ID {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Fatal("same seed gave different samples")
	}
	if same(a, c) {
		t.Fatal("different seeds gave the same sample")
	}
	if same(a, first) {
		t.Fatal("seeded sample equals the first tasks")
	}
}

func TestPlanTemperatureScheduleAndIDs(t *testing.T) {
	t.Parallel()
	spec := schemas.RunSpec{RunID: "r1", Samples: 3, Temperatures: []float64{0, 0.6},
		Policy: schemas.PolicySpec{Name: schemas.PolicyReference}, Options: schemas.DefaultOptions()}
	p := NewPlan(spec, mkTasks(2))
	if len(p.Episodes) != 6 {
		t.Fatalf("episodes = %d, want 6", len(p.Episodes))
	}
	seen := map[string]bool{}
	for i := range p.Episodes {
		r := p.Request(i, time.Unix(0, 0))
		if err := r.Validate(); err != nil {
			t.Fatalf("request %d invalid: %v", i, err)
		}
		if seen[r.EpisodeID] {
			t.Fatalf("duplicate episode id %s", r.EpisodeID)
		}
		seen[r.EpisodeID] = true
		want := 0.6
		if r.SampleIndex == 0 {
			want = 0
		}
		if r.Policy.Temperature == nil || *r.Policy.Temperature != want {
			t.Fatalf("sample %d temperature = %v, want %v", r.SampleIndex, r.Policy.Temperature, want)
		}
		if j, ok := p.Lookup(r.EpisodeID); !ok || j != i {
			t.Fatalf("lookup %s = %d,%v want %d", r.EpisodeID, j, ok, i)
		}
	}
	if got := EpisodeID("r1", "a/b c", 2); got != "r1--a_b_c-k2" {
		t.Fatalf("EpisodeID sanitising = %q", got)
	}
}

func TestPlanSeedPerSample(t *testing.T) {
	t.Parallel()
	seed := int64(40)
	spec := schemas.RunSpec{RunID: "r1", Samples: 3,
		Policy: schemas.PolicySpec{Name: schemas.PolicyReference, Seed: &seed}, Options: schemas.DefaultOptions()}
	p := NewPlan(spec, mkTasks(2))
	for i := range p.Episodes {
		r := p.Request(i, time.Unix(0, 0))
		if r.Policy.Seed == nil || *r.Policy.Seed != 40+int64(r.SampleIndex) {
			t.Fatalf("sample %d seed = %v, want %d", r.SampleIndex, r.Policy.Seed, 40+r.SampleIndex)
		}
	}
	if seed != 40 || *p.Spec.Policy.Seed != 40 {
		t.Fatalf("the run spec's seed changed to %d", *p.Spec.Policy.Seed)
	}
	spec.Policy.Seed = nil
	if r := NewPlan(spec, mkTasks(1)).Request(1, time.Unix(0, 0)); r.Policy.Seed != nil {
		t.Fatalf("unseeded run sent seed %d", *r.Policy.Seed)
	}
}
