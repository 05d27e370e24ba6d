package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
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
			if res.Outcomes[schemas.OutcomeCorrect] != res.Total || res.Total == 0 {
				for _, r := range readRun(t, ctx, f.store, spec.RunID) {
					if r.Outcome != "correct" {
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
