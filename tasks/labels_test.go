package tasks

import (
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
)

func TestDeclaredLabelSetsLoad(t *testing.T) {
	sets, err := DeclaredLabelSets()
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) == 0 || sets[0].ID != MedCalcCorrected || !sets[0].Default {
		t.Fatalf("declared sets %v: want %s first, the default", sets, MedCalcCorrected)
	}
	for _, l := range sets[0].Labels {
		if l.Source == "" || l.Reason == "" || l.Was == "" {
			t.Errorf("%s: a correction without its reason, source or former label", l.TaskID)
		}
	}
	if got := LabelSetsOf(MedCalcDataset); strings.Join(got, ",") != "medcalcbench@v1.0,medcalcbench@medgym-1" {
		t.Errorf("medcalcbench's sets: %v", got)
	}
	if StrictLabelSet(MedCalcDataset) != MedCalcCorrected || StrictLabelSet(TREQSDataset) != "treqs@source" {
		t.Errorf("strict defaults: %s, %s", StrictLabelSet(MedCalcDataset), StrictLabelSet(TREQSDataset))
	}
	if got := LabelSetsOf(TREQSDataset); strings.Join(got, ",") != "treqs@source" {
		t.Errorf("treqs's sets: %v", got)
	}
}

func TestCheckLabelSets(t *testing.T) {
	if err := CheckLabelSets([]string{"medcalcbench@v1.0", "treqs@source"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{
		{"medcalcbench"},    // no set name
		{"medcalcbench@v9"}, // unknown set
		{"nosuch@v1"},       // unknown dataset
		{"medcalcbench@v1.0", "medcalcbench@medgym-1"}, // two for one dataset
		{"treqs@medgym-1"},                  // another dataset's name
		{"medcalcbench@medgym-1/../../etc"}, // junk
		make([]string, 65),                  // too many
	} {
		if err := CheckLabelSets(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// labelTasks are three tasks of one dataset, as a loader returns them.
func labelTasks() []Task {
	lo, hi := 9.5, 10.5
	mk := func(id, answer string) Task {
		return Task{View: schemas.TaskView{ID: id, Dataset: "medcalcbench"},
			Truth: Truth{Type: schemas.AnswerNumber, Answer: answer, Lower: &lo, Upper: &hi}}
	}
	return []Task{mk("medcalcbench-1", "10"), mk("medcalcbench-2", "20"), mk("medcalcbench-3", "30")}
}

func TestTruthForLabelSets(t *testing.T) {
	lo, hi := 11.4, 12.6
	fix := &LabelSet{ID: "medcalcbench@fix", Dataset: "medcalcbench", Base: "medcalcbench@v1.0", Default: true,
		Labels: []Label{{TaskID: "medcalcbench-1", Answer: "12", Lower: &lo, Upper: &hi, Was: "10", Reason: "r", Source: "s"}}}
	ts := labelTasks()
	if err := applySets("medcalcbench", ts, []*LabelSet{fix}); err != nil {
		t.Fatal(err)
	}
	fixed, kept := &ts[0], &ts[1]
	check := func(name string, got Truth, err error, answer, set string, lower float64) {
		t.Helper()
		if err != nil || got.Answer != answer || got.LabelSet != set || *got.Lower != lower {
			t.Errorf("%s: %q %s [%v] %v; want %q %s [%v]", name, got.Answer, got.LabelSet, *got.Lower, err, answer, set, lower)
		}
	}
	tr, err := fixed.TruthFor(false, nil)
	check("strict default", tr, err, "12", "medcalcbench@fix", 11.4)
	tr, err = fixed.TruthFor(true, nil)
	check("upstream default", tr, err, "10", "medcalcbench@v1.0", 9.5)
	tr, err = fixed.TruthFor(false, []string{"treqs@source", "medcalcbench@v1.0"})
	check("chosen base", tr, err, "10", "medcalcbench@v1.0", 9.5)
	tr, err = fixed.TruthFor(true, []string{"medcalcbench@fix"})
	check("chosen fix under upstream rules", tr, err, "12", "medcalcbench@fix", 11.4)
	tr, err = kept.TruthFor(false, []string{"medcalcbench@v1.0"})
	check("unchanged task, base", tr, err, "20", "medcalcbench@v1.0", 9.5)
	tr, err = kept.TruthFor(true, nil)
	check("unchanged task, upstream", tr, err, "20", "medcalcbench@v1.0", 9.5)
	if _, err := kept.TruthFor(false, []string{"medcalcbench@nosuch"}); err == nil {
		t.Error("an unknown set gave a truth")
	}

	// A set whose former label is not the data's is refused: it was written
	// for other data.
	stale := *fix
	stale.Labels = []Label{{TaskID: "medcalcbench-2", Answer: "21", Was: "19", Reason: "r", Source: "s"}}
	if err := applySets("medcalcbench", labelTasks(), []*LabelSet{&stale}); err == nil || !strings.Contains(err.Error(), "was") {
		t.Errorf("stale set applied: %v", err)
	}
}

func TestUpstreamFilesKeepTheirLabels(t *testing.T) {
	task := labelTasks()[0]
	task.Truth.LabelSet = UpstreamLabelSet("medcalcbench")
	if _, err := task.TruthFor(false, []string{MedCalcCorrected}); err == nil {
		t.Error("a declared set applied to an upstream file's task")
	}
	tr, err := task.TruthFor(true, nil)
	if err != nil || tr.LabelSet != UpstreamLabelSet("medcalcbench") {
		t.Errorf("upstream default: %s %v", tr.LabelSet, err)
	}
}
