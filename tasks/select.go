package tasks

import (
	"math/rand/v2"
	"slices"

	"github.com/medgym/medgym/schemas"
)

// Select is a run's task selection, the one rule the dispatcher plans with
// and `medgym run` counts with before it submits: ts filtered by the spec's
// categories and task ids (MatchID: an upstream id matches by its
// <dataset>-<index> prefix), then the first Limit tasks, or a seeded sample
// of Limit tasks when SampleSeed is set.
func Select(spec schemas.RunSpec, ts []Task) []Task {
	out := make([]Task, 0, len(ts))
	for _, t := range ts {
		if len(spec.Categories) > 0 && !slices.Contains(spec.Categories, t.View.Category) {
			continue
		}
		if len(spec.TaskIDs) > 0 && !slices.ContainsFunc(spec.TaskIDs, func(id string) bool { return MatchID(t.View.ID, id) }) {
			continue
		}
		out = append(out, t)
	}
	if spec.Limit > 0 && spec.Limit < len(out) {
		if spec.SampleSeed != 0 {
			r := rand.New(rand.NewPCG(uint64(spec.SampleSeed), 0x6d656467796d))
			idx := r.Perm(len(out))[:spec.Limit]
			slices.Sort(idx)
			sel := make([]Task, len(idx))
			for i, j := range idx {
				sel[i] = out[j]
			}
			return sel
		}
		out = out[:spec.Limit]
	}
	return out
}
