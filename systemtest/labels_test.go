package systemtest

import (
	"context"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/tasks"
)

// TestRescoreUnderAnotherLabelSet stores reference episodes scored against
// MedCalc-Bench's own labels (medcalcbench@v1.0), re-grades them from the
// stored outputs under the corrected set (medcalcbench@medgym-1, the strict
// default), and checks the flips against a live run under that set: the
// same outcome and reward per task, the label set recorded in every row.
func TestRescoreUnderAnotherLabelSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	errata, err := tasks.MedCalcErrata()
	if err != nil {
		t.Fatal(err)
	}
	// One erratum of each answer kind (a decimal, an integer score, a
	// date), and a row whose label both sets share.
	picked := map[int]bool{3: false, 21: false, 13: false}
	var ids []string
	wrong := map[string]bool{}
	for _, e := range errata {
		if done, want := picked[e.CalculatorID]; want && !done {
			picked[e.CalculatorID] = true
			id := tasks.MedCalcDataset + "-" + strconv.Itoa(e.Row)
			ids = append(ids, id)
			wrong[id] = true
		}
	}
	shared := tasks.MedCalcDataset + "-1"
	if wrong[shared] || len(ids) != 3 {
		t.Fatalf("picked %v", ids)
	}
	ids = append(ids, shared)

	f := defaultFlags(t)
	f.TaskIDs, f.RunID, f.Labels = strings.Join(ids, ","), "labels-v1", "medcalcbench@v1.0"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.Store, "labels-v1")
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for _, r := range rows {
		// The reference prints the corrected value: wrong under v1.0 labels
		// on the errata, right on the shared row.
		if r.LabelSet != "medcalcbench@v1.0" || (r.Outcome == "correct") == wrong[r.TaskID] {
			t.Fatalf("%s: label set %q, outcome %s (erratum %v)", r.TaskID, r.LabelSet, r.Outcome, wrong[r.TaskID])
		}
	}

	// Re-grade from the stored outputs under the corrected labels.
	args := []string{"rescore", "--store", f.Store, "--run", "labels-v1", "--data", f.Data, "--library", f.Library,
		"--labels", tasks.MedCalcCorrected, "--write"}
	out, errOut, err := runCLI(t, args...)
	if !errors.Is(err, cli.ErrChanged) {
		t.Fatalf("rescore under %s: err %v, want a change\n%s%s", tasks.MedCalcCorrected, err, out, errOut)
	}
	for _, want := range []string{"0 actions re-executed", "3 episode(s) change reward (3 up, 0 down)",
		"(solved episodes): 3 in, 0 out"} {
		if !strings.Contains(out, want) {
			t.Fatalf("rescore output lacks %q:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`run (\S+): 4 episode\(s\) re-scored`).FindStringSubmatch(out)
	if m == nil || !strings.HasSuffix(m[1], "-medcalcbench_medgym-1") {
		t.Fatalf("rescore --write output:\n%s", out)
	}
	rescored := map[string]parquet.Row{}
	for _, r := range readRun(t, ctx, f.Store, m[1]) {
		rescored[r.TaskID] = r
	}
	if len(rescored) != 4 {
		t.Fatalf("re-graded run holds %d tasks, want 4", len(rescored))
	}
	for _, r := range readRun(t, ctx, f.Store, "labels-v1") {
		if r.LabelSet != "medcalcbench@v1.0" {
			t.Fatalf("the recorded run changed: %s label set %q", r.TaskID, r.LabelSet)
		}
	}

	// A live run under the default labels agrees with the re-grade.
	live := defaultFlags(t)
	live.TaskIDs, live.RunID = f.TaskIDs, "labels-default"
	spec, err = live.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, live, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, r := range readRun(t, ctx, live.Store, "labels-default") {
		g := rescored[r.TaskID]
		if r.LabelSet != tasks.MedCalcCorrected || g.LabelSet != r.LabelSet || g.Outcome != r.Outcome || g.Reward != r.Reward || r.Outcome != "correct" {
			t.Errorf("%s: live %s %s %v, re-graded %s %s %v", r.TaskID, r.LabelSet, r.Outcome, r.Reward, g.LabelSet, g.Outcome, g.Reward)
		}
	}

	// An unknown set is refused before anything runs.
	bad := defaultFlags(t)
	bad.TaskIDs, bad.Labels = shared, "medcalcbench@v9"
	if spec, err = bad.Spec(); err == nil {
		_, err = cli.RunSpec(ctx, spec, bad, io.Discard)
	}
	if err == nil || !strings.Contains(err.Error(), "medcalcbench@v9") {
		t.Fatalf("run with an unknown label set: %v", err)
	}
}
