package generate

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

func TestClinicalMLTasks(t *testing.T) {
	dir, train, test := generateInto(t, tasks.ClinicalMLDataset)
	checkSplits(t, tasks.ClinicalMLDataset, train, test)
	all := append(append([]tasks.Task(nil), train...), test...)
	if n := len(all); n < 24 || n > 60 {
		t.Errorf("%d tasks, want a few dozen", n)
	}
	for _, f := range []string{"LICENSE.md", "PROVENANCE.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	for _, task := range all {
		v, tr := task.View, task.Truth
		if v.AnswerType != schemas.AnswerPredictions || tr.Type != schemas.AnswerPredictions ||
			len(v.OutputFiles) != 1 || v.OutputFiles[0] != tr.Extra[tasks.ExtraOutputFile] || len(v.Resources) != 1 {
			t.Fatalf("%s: view %+v truth %+v", v.ID, v, tr.Extra)
		}
		checkNoLabels(t, dir, task)
	}
}

// checkNoLabels asserts the folder the agent sees holds train.csv and
// test_features.csv only, and that the test file has no label column.
func checkNoLabels(t *testing.T, dir string, task tasks.Task) {
	t.Helper()
	folder := filepath.Join(filepath.Dir(dir), filepath.FromSlash(task.View.Resources[0]))
	ents, err := os.ReadDir(folder)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "test_features.csv,train.csv" {
		t.Errorf("%s: folder holds %v", task.View.ID, names)
	}
	b, err := os.ReadFile(filepath.Join(folder, "test_features.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	header := strings.Split(lines[0], ",")
	trb, _ := os.ReadFile(filepath.Join(folder, "train.csv"))
	trHeader := strings.Split(strings.SplitN(string(trb), "\n", 2)[0], ",")
	label := trHeader[len(trHeader)-1]
	for _, h := range header {
		if h == label {
			t.Errorf("%s: test_features.csv has the label column %q", task.View.ID, label)
		}
	}
	if strings.Join(header, ",") != strings.Join(trHeader[:len(trHeader)-1], ",") {
		t.Errorf("%s: test header %v vs train %v", task.View.ID, header, trHeader)
	}
	if len(lines)-1 != len(task.Truth.Values) {
		t.Errorf("%s: %d test rows, %d gold labels", task.View.ID, len(lines)-1, len(task.Truth.Values))
	}
}

func TestClinicalMLDeterministic(t *testing.T) {
	checkDeterministic(t, tasks.ClinicalMLDataset)
}

// TestClinicalMLSolvable runs every reference in a temporary working
// directory and scores its predictions.csv with the strict rule (accuracy
// and AUROC over every gold row; the verifier's own tests cover its code,
// and systemtest's TestReferenceSolutionsPassEveryDataset runs these
// references through the real sandbox and verifier).
func TestClinicalMLSolvable(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s", python)
	}
	dir, train, test := generateInto(t, tasks.ClinicalMLDataset)
	ts := append(append([]tasks.Task(nil), train...), test...)
	if testing.Short() {
		ts = sampleSpread(ts, 1)
	}
	for _, task := range ts {
		work := t.TempDir()
		cmd := pythonCmd(t, task.Reference, work, dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: reference failed: %v\n%s", task.View.ID, err, out)
		}
		b, err := os.ReadFile(filepath.Join(work, "predictions.csv"))
		if err != nil {
			t.Fatalf("%s: %v", task.View.ID, err)
		}
		acc, auc, err := mirrorPredictionScore(task.Truth, string(b))
		if err != nil {
			t.Fatalf("%s: %v", task.View.ID, err)
		}
		minAcc, _ := strconv.ParseFloat(task.Truth.Extra[tasks.ExtraMinAccuracy], 64)
		ok := acc >= minAcc
		if s := task.Truth.Extra[tasks.ExtraMinAUROC]; s != "" {
			minAUC, _ := strconv.ParseFloat(s, 64)
			ok = ok && auc >= minAUC
		}
		t.Logf("%-40s acc %.3f (min %s) auc %.3f (min %s)", task.View.ID, acc, task.Truth.Extra[tasks.ExtraMinAccuracy], auc, task.Truth.Extra[tasks.ExtraMinAUROC])
		if !ok {
			t.Errorf("%s: reference does not reach the thresholds", task.View.ID)
		}
	}
}

// mirrorPredictionScore mirrors the verifier's strict predictions rule for
// the reference's own output (columns id, prediction, score).
func mirrorPredictionScore(tr tasks.Truth, data string) (acc, auc float64, err error) {
	lines := strings.Split(strings.TrimSpace(data), "\n")
	if lines[0] != "id,prediction,score" {
		return 0, 0, fmt.Errorf("header %q", lines[0])
	}
	pred, score := map[string]string{}, map[string]float64{}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		pred[f[0]] = f[1]
		score[f[0]], _ = strconv.ParseFloat(f[2], 64)
	}
	var pos, neg []float64
	correct := 0
	for _, v := range tr.Values {
		id, label, _ := strings.Cut(v, "=")
		if pred[id] == label {
			correct++
		}
		s, ok := score[id]
		if !ok {
			s = math.NaN()
		}
		if label == "1" {
			pos = append(pos, s)
		} else {
			neg = append(neg, s)
		}
	}
	sort.Float64s(neg)
	var sum float64
	for _, p := range pos {
		for _, n := range neg {
			switch {
			case p > n:
				sum++
			case p == n:
				sum += 0.5
			}
		}
	}
	return float64(correct) / float64(len(tr.Values)), sum / float64(len(pos)*len(neg)), nil
}

// pythonCmd runs code with Debian's python in work, MEDGYM_DATA_DIR=dataDir.
func pythonCmd(t *testing.T, code, work, dataDir string) *exec.Cmd {
	cmd := exec.CommandContext(t.Context(), python, "-c", code)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "MEDGYM_DATA_DIR="+dataDir, "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1")
	return cmd
}
