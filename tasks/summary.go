package tasks

import (
	"sort"

	"github.com/medgym/medgym/schemas"
)

// Summary describes a set of tasks, one group per dataset and split.
type Summary struct {
	Groups []GroupSummary `json:"groups"`
}

// GroupSummary counts the tasks of one dataset split.
type GroupSummary struct {
	Dataset     string                     `json:"dataset"`
	Split       string                     `json:"split"`
	Count       int                        `json:"count"`
	Categories  map[string]int             `json:"categories"`
	AnswerTypes map[schemas.AnswerType]int `json:"answer_types"`
	// Unanswerable counts the tasks whose correct outcome is an
	// abstention (EHRSQL 2024).
	Unanswerable int `json:"unanswerable,omitempty"`
}

// Summarize counts ts per dataset and split; groups are sorted by dataset,
// then split.
func Summarize(ts []Task) Summary {
	type key struct{ dataset, split string }
	groups := map[key]*GroupSummary{}
	for _, t := range ts {
		k := key{t.View.Dataset, t.View.Split}
		g, ok := groups[k]
		if !ok {
			g = &GroupSummary{Dataset: k.dataset, Split: k.split,
				Categories: map[string]int{}, AnswerTypes: map[schemas.AnswerType]int{}}
			groups[k] = g
		}
		g.Count++
		g.Categories[t.View.Category]++
		g.AnswerTypes[t.View.AnswerType]++
		if t.Truth.Unanswerable {
			g.Unanswerable++
		}
	}
	s := Summary{Groups: make([]GroupSummary, 0, len(groups))}
	for _, g := range groups {
		s.Groups = append(s.Groups, *g)
	}
	sort.Slice(s.Groups, func(i, j int) bool {
		a, b := s.Groups[i], s.Groups[j]
		if a.Dataset != b.Dataset {
			return a.Dataset < b.Dataset
		}
		return a.Split < b.Split
	})
	return s
}
