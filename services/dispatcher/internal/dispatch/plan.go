package dispatch

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Select filters ts by the spec's categories and task ids, then keeps the
// first Limit tasks, or a seeded sample of Limit tasks when SampleSeed is set.
func Select(spec schemas.RunSpec, ts []tasks.Task) []tasks.Task {
	out := make([]tasks.Task, 0, len(ts))
	for _, t := range ts {
		if len(spec.Categories) > 0 && !slices.Contains(spec.Categories, t.View.Category) {
			continue
		}
		if len(spec.TaskIDs) > 0 && !slices.ContainsFunc(spec.TaskIDs, func(id string) bool { return tasks.MatchID(t.View.ID, id) }) {
			continue
		}
		out = append(out, t)
	}
	if spec.Limit > 0 && spec.Limit < len(out) {
		if spec.SampleSeed != 0 {
			r := rand.New(rand.NewPCG(uint64(spec.SampleSeed), 0x6d656467796d))
			idx := r.Perm(len(out))[:spec.Limit]
			slices.Sort(idx)
			sel := make([]tasks.Task, len(idx))
			for i, j := range idx {
				sel[i] = out[j]
			}
			return sel
		}
		out = out[:spec.Limit]
	}
	return out
}

// Episode is one planned episode.
type Episode struct {
	Task   schemas.TaskView
	Sample int
}

// Plan is the ordered list of a run's episodes: task-major, sample-minor.
type Plan struct {
	Spec     schemas.RunSpec
	Episodes []Episode
	byID     map[string]int
}

// NewPlan expands the selected tasks into K samples each.
func NewPlan(spec schemas.RunSpec, selected []tasks.Task) *Plan {
	p := &Plan{Spec: spec, byID: map[string]int{}}
	for _, t := range selected {
		for k := range spec.Samples {
			p.byID[EpisodeID(spec.RunID, t.View.ID, k)] = len(p.Episodes)
			p.Episodes = append(p.Episodes, Episode{Task: t.View, Sample: k})
		}
	}
	return p
}

// EpisodeID names sample k of a task in a run. It is unique across runs:
// workers key episode state and sandboxes by it. Task ids are made
// subject-safe.
func EpisodeID(runID, taskID string, k int) string {
	var b strings.Builder
	b.WriteString(runID)
	b.WriteString("--")
	for _, r := range taskID {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return fmt.Sprintf("%s-k%d", b.String(), k)
}

// Request builds the i-th episode request of the plan.
func (p *Plan) Request(i int, now time.Time) schemas.EpisodeRequest {
	e := p.Episodes[i]
	pol := p.Spec.Policy
	if ts := p.Spec.Temperatures; len(ts) > 0 {
		t := ts[min(e.Sample, len(ts)-1)]
		pol.Temperature = &t
	}
	if pol.Seed != nil {
		// Sample k gets Seed+k: with one seed for all K samples an engine
		// that honours it (vLLM) would sample K identical episodes.
		seed := *pol.Seed + int64(e.Sample)
		pol.Seed = &seed
	}
	return schemas.EpisodeRequest{
		RunID: p.Spec.RunID, EpisodeID: EpisodeID(p.Spec.RunID, e.Task.ID, e.Sample), SampleIndex: e.Sample,
		Task: e.Task, Policy: pol, Options: p.Spec.Options, RequestedAt: now,
	}
}

// Lookup finds an episode's index by id.
func (p *Plan) Lookup(episodeID string) (int, bool) {
	i, ok := p.byID[episodeID]
	return i, ok
}
