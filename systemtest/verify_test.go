package systemtest

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
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
			f.Library = lib
			f.Datasets, f.Limit, f.Seed, f.RunID = ds, 6, 11, "verify-"+ds
			if _, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: "test", DataRoot: f.Data, LibraryDir: lib}); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("dataset %s: %v (make library)", ds, err)
				}
				t.Skipf("dataset %s not available: %v (run make library)", ds, err)
			}
			spec, err := f.Spec()
			if err != nil {
				t.Fatal(err)
			}
			res, err := cli.RunSpec(ctx, spec, f, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cli.Solved(res.Outcomes) != res.Total || res.Total == 0 {
				for _, r := range readRun(t, ctx, f.Store, spec.RunID) {
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
// test tasks, ending on the accepted code run (the reference prints
// "null"), on the explicit answer action (it answers "null"), and under
// --upstream-compat (no answer action): the unanswerable ones must end
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
	for _, endOn := range []string{schemas.EndOnAccepted, schemas.EndOnAnswer, "upstream-compat"} {
		t.Run(endOn, func(t *testing.T) {
			f := baseFlags(t)
			f.Library = lib
			f.Datasets, f.TaskIDs, f.RunID = tasks.EHRSQL2024Dataset, strings.Join(ids, ","), "abstain-"+endOn
			if endOn == "upstream-compat" { // no answer action: the printed null abstains
				f.UpstreamCompat = true
			} else {
				f.EndOn = endOn
			}
			spec, err := f.Spec()
			if err != nil {
				t.Fatal(err)
			}
			res, err := cli.RunSpec(ctx, spec, f, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcomes[schemas.OutcomeAbstainedCorrectly] != 3 || res.Outcomes[schemas.OutcomeCorrect] != 3 {
				t.Fatalf("outcomes %v, want 3 abstained_correctly and 3 correct", res.Outcomes)
			}
			for _, r := range readRun(t, ctx, f.Store, spec.RunID) {
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

// TestWrongAnswerPenaltyInPipeline plays a fake model that only ever runs
// a program printing a wrong number on four ehrsql2024 tasks with
// --wrong-answer-penalty 5: every episode ends without a correct answer or
// abstention and is stored with reward −5 (RS(5) of the run is −5), while
// the same run without the penalty stores 0.
func TestWrongAnswerPenaltyInPipeline(t *testing.T) {
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
	un := 0
	for _, tk := range ts {
		if len(ids) < 4 && (tk.Truth.Unanswerable || un >= 2) {
			ids = append(ids, tk.View.ID)
			if tk.Truth.Unanswerable {
				un++
			}
		}
	}
	srv := httptest.NewServer(fakellm.New(fakellm.Config{Policy: fakellm.PolicyReference, PCorrect: 0, Seed: 3, Model: "always-wrong"}))
	defer srv.Close()
	for _, penalty := range []float64{5, 0} {
		f := baseFlags(t)
		f.Library = lib
		f.Datasets, f.TaskIDs, f.MaxTurns = tasks.EHRSQL2024Dataset, strings.Join(ids, ","), 2
		f.Policy, f.LLMURL, f.Model = "openai", srv.URL+"/v1", "always-wrong"
		f.Verifier.Scoring.WrongAnswerPenalty, f.RunID = penalty, fmt.Sprintf("penalty-%g", penalty)
		spec, err := f.Spec()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
			t.Fatal(err)
		}
		rows := readRun(t, ctx, f.Store, spec.RunID)
		if len(rows) != 4 {
			t.Fatalf("penalty %g: %d rows, want 4", penalty, len(rows))
		}
		for _, r := range rows {
			if sc, ok := schemas.Outcome(r.Outcome).Reliability(); !ok || sc != -1 || r.Reward != -penalty {
				t.Errorf("penalty %g: %s ended %s with reward %v, want a −1 outcome with reward %v", penalty, r.TaskID, r.Outcome, r.Reward, -penalty)
			}
		}
	}
}

// A negative wrong-answer penalty would reward wrong answers: the
// in-process verifier refuses to start with one.
func TestNegativeWrongAnswerPenaltyRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.Limit, f.RunID, f.Verifier.Scoring.WrongAnswerPenalty = 1, "neg-penalty", -1
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err == nil || !strings.Contains(err.Error(), "wrong-answer penalty") {
		t.Fatalf("run with penalty -1: %v, want a wrong-answer penalty error", err)
	}
}
