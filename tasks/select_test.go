package tasks

import (
	"fmt"
	"testing"

	"github.com/medgym/medgym/schemas"
)

func mkTasks(n int) []Task {
	ts := make([]Task, n)
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
	same := func(x, y []Task) bool {
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
