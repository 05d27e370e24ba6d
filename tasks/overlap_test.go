package tasks

import (
	"testing"

	"github.com/medgym/medgym/schemas"
)

func qtask(s string) Task { return Task{View: schemas.TaskView{Question: s}} }

func TestNGramOverlap(t *testing.T) {
	t.Parallel()
	train := []Task{qtask("what is the total number of patients admitted in 2104 to the icu ward")}
	test := []Task{
		qtask("What is the total number of patients admitted in 2104 to the ICU ward"), // exact (case/space-insensitive)
		qtask("what is the total number of patients admitted in 2105 to the icu"),      // shares a 5-gram
		qtask("name the drug prescribed most often"),                                   // nothing
	}
	o := NGramOverlap(train, test, 5)
	if o.Test != 3 || o.ExactShared != 1 || o.WithShared != 2 {
		t.Fatalf("overlap = %+v, want 3 test, 1 exact, 2 with a shared 5-gram", o)
	}
	if o10 := NGramOverlap(train, test[1:], 10); o10.WithShared != 0 {
		t.Fatalf("10-gram overlap = %+v, want none", o10)
	}
}
