package schemas_test

import (
	"testing"

	"github.com/medgym/medgym/schemas"
)

func TestEpisodeID(t *testing.T) {
	if got := schemas.EpisodeID("r1", "calc/12 a", 3); got != "r1--calc_12_a-k3" {
		t.Fatalf("EpisodeID = %q", got)
	}
	if !schemas.ValidToken(schemas.EpisodeID("r1", "a.b/c:d", 0)) {
		t.Fatal("an episode id is not a valid subject token")
	}
}

func TestRunSpecAdmits(t *testing.T) {
	spec := schemas.RunSpec{RunID: "r1", Datasets: []string{"medcalcbench", "eicu"}, Samples: 2,
		Categories: []string{"lab"}}
	claim := func(mod func(*schemas.EpisodeClaim)) schemas.EpisodeClaim {
		c := schemas.EpisodeClaim{RunID: "r1", EpisodeID: schemas.EpisodeID("r1", "t/1", 1), TaskID: "t/1",
			Dataset: "eicu", Category: "lab", Sample: 1}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	ok := map[string]schemas.EpisodeClaim{
		"request":           claim(nil),
		"ref (no sample)":   claim(func(c *schemas.EpisodeClaim) { c.Sample, c.Category = -1, "" }),
		"ref of sample 0":   claim(func(c *schemas.EpisodeClaim) { c.Sample, c.EpisodeID = -1, schemas.EpisodeID("r1", "t/1", 0) }),
		"no category known": claim(func(c *schemas.EpisodeClaim) { c.Category = "" }),
	}
	for name, c := range ok {
		if err := spec.Admits(c); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]schemas.EpisodeClaim{
		"other run":          claim(func(c *schemas.EpisodeClaim) { c.RunID = "r2" }),
		"other dataset":      claim(func(c *schemas.EpisodeClaim) { c.Dataset = "treqs" }),
		"other category":     claim(func(c *schemas.EpisodeClaim) { c.Category = "dosage" }),
		"sample beyond K":    claim(func(c *schemas.EpisodeClaim) { c.Sample, c.EpisodeID = 2, schemas.EpisodeID("r1", "t/1", 2) }),
		"negative sample":    claim(func(c *schemas.EpisodeClaim) { c.Sample = -3 }),
		"id of another task": claim(func(c *schemas.EpisodeClaim) { c.EpisodeID = schemas.EpisodeID("r1", "t/2", 1) }),
		"id of another run":  claim(func(c *schemas.EpisodeClaim) { c.EpisodeID = schemas.EpisodeID("r2", "t/1", 1) }),
		"made-up id":         claim(func(c *schemas.EpisodeClaim) { c.EpisodeID = "r1--anything" }),
		"ref beyond K":       claim(func(c *schemas.EpisodeClaim) { c.Sample, c.EpisodeID = -1, schemas.EpisodeID("r1", "t/1", 5) }),
		"ref, padded sample": claim(func(c *schemas.EpisodeClaim) { c.Sample, c.EpisodeID = -1, "r1--t_1-k01" }),
		"ref, no task":       claim(func(c *schemas.EpisodeClaim) { c.Sample, c.TaskID = -1, "" }),
	}
	for name, c := range bad {
		if err := spec.Admits(c); err == nil {
			t.Errorf("%s: admitted %+v", name, c)
		}
	}
	withTasks := spec
	withTasks.TaskIDs = []string{"t/9"}
	if err := withTasks.Admits(claim(nil)); err == nil {
		t.Error("a task outside the spec's task ids was admitted")
	}
}
