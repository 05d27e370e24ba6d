package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// TestReferenceSolutionsPassEveryDataset runs a fixed, seeded sample of
// every built-in dataset's reference solutions through the real pipeline
// (sandbox and verifier): all of them must be scored correct.
func TestReferenceSolutionsPassEveryDataset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs episodes of every dataset")
	}
	lib := os.Getenv("MEDGYM_LIBRARY")
	if lib == "" {
		lib = filepath.Join(repoRoot(t), "build", "library")
	}
	for _, ds := range tasks.Datasets() {
		t.Run(ds, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			f := baseFlags(t)
			f.library = lib
			f.datasets, f.limit, f.seed, f.runID = ds, 6, 11, "verify-"+ds
			if _, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: "test", DataRoot: f.data, LibraryDir: lib}); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("dataset %s: %v (make library)", ds, err)
				}
				t.Skipf("dataset %s not available: %v (run make library)", ds, err)
			}
			spec, err := f.spec()
			if err != nil {
				t.Fatal(err)
			}
			res, err := runSpec(ctx, spec, f, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if solved(res.Outcomes) != res.Total || res.Total == 0 {
				for _, r := range readRun(t, ctx, f.store, spec.RunID) {
					if !schemas.Outcome(r.Outcome).Solved() {
						last := ""
						if n := len(r.Turns); n > 0 {
							last = r.Turns[n-1].Stdout + r.Turns[n-1].Stderr
						}
						t.Errorf("%s: %s (%s) output %q", r.TaskID, r.Outcome, r.Error, tail(last, 300))
					}
				}
				t.Fatalf("%s: outcomes %v of %d", ds, res.Outcomes, res.Total)
			}
		})
	}
}

// TestReferenceAbstainsOnUnanswerable runs EHRSQL 2024's reference policy
// through the real pipeline on three unanswerable and three answerable
// test tasks, once ending on the accepted code run (upstream-compatible:
// the reference prints "null") and once on the explicit answer action
// (the reference answers "null"): the unanswerable ones must end
// abstained_correctly, the others correct.
func TestReferenceAbstainsOnUnanswerable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs episodes")
	}
	lib := os.Getenv("MEDGYM_LIBRARY")
	if lib == "" {
		lib = filepath.Join(repoRoot(t), "build", "library")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: tasks.EHRSQL2024Dataset, Split: "test", LibraryDir: lib})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (make library)", err)
		}
		t.Skipf("dataset not available: %v (run make library)", err)
	}
	var ids []string
	un, ans := 0, 0
	for _, tk := range ts {
		switch {
		case tk.Truth.Unanswerable && un < 3:
			un++
			ids = append(ids, tk.View.ID)
		case !tk.Truth.Unanswerable && ans < 3:
			ans++
			ids = append(ids, tk.View.ID)
		}
	}
	for _, endOn := range []string{schemas.EndOnAccepted, schemas.EndOnAnswer} {
		t.Run(endOn, func(t *testing.T) {
			f := baseFlags(t)
			f.library = lib
			f.datasets, f.taskIDs, f.endOn, f.runID = tasks.EHRSQL2024Dataset, strings.Join(ids, ","), endOn, "abstain-"+endOn
			spec, err := f.spec()
			if err != nil {
				t.Fatal(err)
			}
			res, err := runSpec(ctx, spec, f, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcomes[schemas.OutcomeAbstainedCorrectly] != 3 || res.Outcomes[schemas.OutcomeCorrect] != 3 {
				t.Fatalf("outcomes %v, want 3 abstained_correctly and 3 correct", res.Outcomes)
			}
			for _, r := range readRun(t, ctx, f.store, spec.RunID) {
				if r.Reward != 1 {
					t.Errorf("%s: %s with reward %v", r.TaskID, r.Outcome, r.Reward)
				}
				if endOn == schemas.EndOnAnswer && r.Termination != string(schemas.EndAnswered) {
					t.Errorf("%s: termination %s, want answered", r.TaskID, r.Termination)
				}
			}
		})
	}
}
