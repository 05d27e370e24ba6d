package report

import (
	"cmp"
	"slices"
)

// Baseline is the best constant answer of one dataset: the one answer
// that, given to every task of the run, the most tasks accept (from the
// verifier tree's truths). A model's success near it learned the label
// distribution, not the task.
type Baseline struct {
	Dataset string
	// Answer is the constant ("" when no candidate is accepted anywhere,
	// or the dataset's tasks take no answer text: predictions, program
	// output).
	Answer string
	// Tasks is the number of the run's distinct tasks of the dataset whose
	// truths were read; Hits how many of them accept Answer.
	Tasks, Hits int
	// Note says why there is no baseline, when there is none.
	Note string
}

// Rate is Hits/Tasks.
func (b Baseline) Rate() float64 { return ratio(b.Hits, b.Tasks) }

// MaxCandidates bounds the constants tried per dataset: the most frequent
// truths (a constant that is nobody's truth is accepted only through a
// tolerance, never more often than the truths around it).
const MaxCandidates = 64

// BestConstant finds dataset's best constant answer over n tasks: each
// candidate (the tasks' own truths, most frequent first, at most
// MaxCandidates, plus extra such as the abstention answer) is given to every
// task, accepts(i, a) says whether task i accepts answer a, and the answer
// accepted by the most tasks wins (ties: the more frequent truth, then the
// smaller string).
func BestConstant(dataset string, truths []string, extra []string, accepts func(i int, answer string) bool) Baseline {
	b := Baseline{Dataset: dataset, Tasks: len(truths)}
	freq := map[string]int{}
	for _, t := range truths {
		if t != "" {
			freq[t]++
		}
	}
	cands := make([]string, 0, len(freq))
	for a := range freq {
		cands = append(cands, a)
	}
	slices.SortFunc(cands, func(x, y string) int { return cmp.Or(cmp.Compare(freq[y], freq[x]), cmp.Compare(x, y)) })
	if len(cands) > MaxCandidates {
		cands = cands[:MaxCandidates]
	}
	for _, e := range extra {
		if !slices.Contains(cands, e) {
			cands = append(cands, e)
		}
	}
	for _, a := range cands {
		hits := 0
		for i := range truths {
			if accepts(i, a) {
				hits++
			}
		}
		if hits > b.Hits {
			b.Answer, b.Hits = a, hits
		}
	}
	return b
}
