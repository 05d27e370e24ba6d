package tasks

import "strings"

// Overlap reports how much of a test split shares word n-grams with its
// train split, as upstream's decontamination check does with 10-grams.
// Templated questions share template text by design; ExactShared counts
// test questions that appear verbatim in train, which must be zero.
type Overlap struct {
	N            int     `json:"n"`
	Test         int     `json:"test"`
	WithShared   int     `json:"test_with_shared_ngram"`
	Fraction     float64 `json:"fraction"`
	ExactShared  int     `json:"exact_shared_questions"`
	SharedNGrams int     `json:"shared_ngrams"`
}

// NGramOverlap compares test questions with train questions.
func NGramOverlap(train, test []Task, n int) Overlap {
	grams := map[string]struct{}{}
	exact := map[string]struct{}{}
	for _, t := range train {
		q := normQuestion(t.View.Question)
		exact[q] = struct{}{}
		for _, g := range ngrams(q, n) {
			grams[g] = struct{}{}
		}
	}
	o := Overlap{N: n, Test: len(test)}
	shared := map[string]struct{}{}
	for _, t := range test {
		q := normQuestion(t.View.Question)
		if _, ok := exact[q]; ok {
			o.ExactShared++
		}
		hit := false
		for _, g := range ngrams(q, n) {
			if _, ok := grams[g]; ok {
				hit = true
				shared[g] = struct{}{}
			}
		}
		if hit {
			o.WithShared++
		}
	}
	o.SharedNGrams = len(shared)
	if o.Test > 0 {
		o.Fraction = float64(o.WithShared) / float64(o.Test)
	}
	return o
}

func normQuestion(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }

func ngrams(s string, n int) []string {
	w := strings.Fields(s)
	if len(w) < n {
		return nil
	}
	out := make([]string, 0, len(w)-n+1)
	for i := 0; i+n <= len(w); i++ {
		out = append(out, strings.Join(w[i:i+n], " "))
	}
	return out
}
