package tasks

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

const python = "/usr/bin/python3"

// dataRoot finds the shared data: $MEDGYM_DATA, or ../shared/data next to
// the directory holding go.work.
func dataRoot(t *testing.T) string {
	t.Helper()
	d := DataRoot()
	if _, err := os.Stat(filepath.Join(d, medCalcFile)); err != nil {
		t.Skipf("no shared data at %s", d)
	}
	return d
}

func loadAllMedCalc(t *testing.T) []Task {
	t.Helper()
	all, err := readMedCalc(t.Context(), filepath.Join(dataRoot(t), medCalcFile))
	if err != nil {
		t.Fatal(err)
	}
	return all
}

var intRE = regexp.MustCompile(`-?\d+`)

// strictCheck applies PROVENANCE.md's strict rule to a reference's stdout.
func strictCheck(tr Truth, out string) error {
	got := strings.TrimSpace(out)
	switch tr.Type {
	case schemas.AnswerDate:
		g, err := time.Parse("01/02/2006", got)
		if err != nil {
			return fmt.Errorf("answer %q is not a date", got)
		}
		w, err := time.Parse("01/02/2006", tr.Answer)
		if err != nil {
			return fmt.Errorf("truth %q is not a date", tr.Answer)
		}
		if !g.Equal(w) {
			return fmt.Errorf("date %s, want %s", got, tr.Answer)
		}
	case schemas.AnswerTuple:
		g, w := intRE.FindAllString(got, -1), intRE.FindAllString(tr.Answer, -1)
		if len(g) != 2 || len(w) != 2 || g[0] != w[0] || g[1] != w[1] {
			return fmt.Errorf("tuple %s, want %s", got, tr.Answer)
		}
	case schemas.AnswerInteger:
		g, err := strconv.ParseFloat(got, 64)
		if err != nil {
			return fmt.Errorf("answer %q is not a number", got)
		}
		w, err := strconv.ParseFloat(tr.Answer, 64)
		if err != nil {
			return fmt.Errorf("truth %q is not a number", tr.Answer)
		}
		if math.RoundToEven(g) != w { // Python's round()
			return fmt.Errorf("round(%s) != %s", got, tr.Answer)
		}
	case schemas.AnswerNumber:
		g, err := strconv.ParseFloat(got, 64)
		if err != nil {
			return fmt.Errorf("answer %q is not a number", got)
		}
		if tr.Lower == nil || tr.Upper == nil || g < *tr.Lower || g > *tr.Upper {
			return fmt.Errorf("%s outside [%v, %v]", got, deref(tr.Lower), deref(tr.Upper))
		}
	default:
		return fmt.Errorf("unexpected answer type %q", tr.Type)
	}
	return nil
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// runReferences runs each task's reference with Debian's python, in
// parallel, and returns stdout per task id.
func runReferences(t *testing.T, ts []Task) map[string]string {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s", python)
	}
	out := make(map[string]string, len(ts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan *Task)
	for range max(2, runtime.NumCPU()) {
		wg.Go(func() {
			for task := range work {
				cmd := exec.CommandContext(t.Context(), python, "-I", "-c", task.Reference)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				b, err := cmd.Output()
				if err != nil {
					t.Errorf("%s: reference failed: %v\n%s", task.View.ID, err, stderr.String())
				}
				mu.Lock()
				out[task.View.ID] = string(b)
				mu.Unlock()
			}
		})
	}
	for i := range ts {
		work <- &ts[i]
	}
	close(work)
	wg.Wait()
	return out
}

// sample keeps the first n tasks of each category.
func sample(ts []Task, n int) []Task {
	seen := map[string]int{}
	var out []Task
	for _, t := range ts {
		if seen[t.View.Category] < n {
			seen[t.View.Category]++
			out = append(out, t)
		}
	}
	return out
}

func TestMedCalcReferencesSolveTestSplit(t *testing.T) {
	ts, err := Load(t.Context(), Source{Dataset: MedCalcDataset, Split: "test", DataRoot: dataRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		ts = sample(ts, 3)
	}
	outs := runReferences(t, ts)
	for _, task := range ts {
		if err := strictCheck(task.Truth, outs[task.View.ID]); err != nil {
			t.Errorf("%s (%s): %v", task.View.ID, task.View.Category, err)
		}
	}
	t.Logf("%d references checked", len(ts))
}

func TestMedCalcErrataAreLabelErrors(t *testing.T) {
	errata, err := MedCalcErrata()
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Task{}
	for _, task := range loadAllMedCalc(t) {
		byID[task.View.ID] = task
	}
	var ts []Task
	for _, e := range errata {
		task, ok := byID[medCalcID(e.Row)]
		if !ok {
			t.Fatalf("erratum row %d is not in the data", e.Row)
		}
		if task.Truth.Answer != e.Label || task.Truth.Extra["calculator_id"] != strconv.Itoa(e.CalculatorID) {
			t.Errorf("erratum row %d: label %q calculator %d, data has %q calculator %s",
				e.Row, e.Label, e.CalculatorID, task.Truth.Answer, task.Truth.Extra["calculator_id"])
		}
		if e.Reason == "" || e.Inputs == "" {
			t.Errorf("erratum row %d: no evidence", e.Row)
		}
		ts = append(ts, task)
	}
	if testing.Short() {
		ts = sample(ts, 3)
	}
	outs := runReferences(t, ts)
	want := map[string]string{}
	for _, e := range errata {
		want[medCalcID(e.Row)] = e.Correct
	}
	for _, task := range ts {
		got := strings.TrimSpace(outs[task.View.ID])
		if got != want[task.View.ID] {
			t.Errorf("%s: reference prints %q, erratum says correct is %q", task.View.ID, got, want[task.View.ID])
		}
		if strictCheck(task.Truth, got) == nil {
			t.Errorf("%s: reference %q matches the label %q, so it is no erratum", task.View.ID, got, task.Truth.Answer)
		}
	}
}

func TestMedCalcLoad(t *testing.T) {
	root := dataRoot(t)
	all := loadAllMedCalc(t)
	ts, err := Load(t.Context(), Source{Dataset: MedCalcDataset, Split: "test", DataRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	errata, err := MedCalcErrata()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 807 || len(ts) != len(all) || len(errata) != 129 {
		t.Fatalf("rows %d, test tasks %d, errata %d", len(all), len(ts), len(errata))
	}
	ids := map[string]bool{}
	cats := map[string]bool{}
	for _, task := range all {
		v := task.View
		if err := v.Validate(); err != nil {
			t.Fatal(err)
		}
		if ids[v.ID] {
			t.Fatalf("duplicate id %s", v.ID)
		}
		ids[v.ID] = true
		cats[v.Category] = true
		if v.Context == "" || v.Instruction == "" || v.Split != "test" || len(v.PermittedActions) != 4 {
			t.Fatalf("%s: incomplete view %+v", v.ID, v)
		}
		id := task.Truth.Extra["calculator_id"]
		want := map[string]schemas.AnswerType{"13": schemas.AnswerDate, "68": schemas.AnswerDate, "69": schemas.AnswerTuple}[id]
		if want == "" {
			want = map[string]schemas.AnswerType{"decimal": schemas.AnswerNumber, "integer": schemas.AnswerInteger}[task.Truth.Extra["output_type"]]
		}
		if v.AnswerType != want || task.Truth.Type != want {
			t.Errorf("%s: answer type %s/%s, want %s", v.ID, v.AnswerType, task.Truth.Type, want)
		}
		if want == schemas.AnswerNumber && (task.Truth.Lower == nil || task.Truth.Upper == nil) {
			t.Errorf("%s: decimal task without bounds", v.ID)
		}
		if !strings.HasSuffix(task.Reference, "print(answer)\n") || strings.Contains(task.Reference, "Ground Truth") {
			t.Errorf("%s: reference is not a self-contained program", v.ID)
		}
	}
	if len(cats) != 55 {
		t.Errorf("%d categories, want 55", len(cats))
	}
	// Every row is a test task: an erratum's truth is the corrected label
	// (the strict default set), with the v1.0 label beside it.
	ix := NewIndex(ts)
	wrong := map[string]MedCalcErratum{}
	for _, e := range errata {
		wrong[medCalcID(e.Row)] = e
	}
	for _, task := range ts {
		e, isErratum := wrong[task.View.ID]
		if task.Truth.LabelSet != MedCalcCorrected {
			t.Fatalf("%s: truth of label set %q, want %s", task.View.ID, task.Truth.LabelSet, MedCalcCorrected)
		}
		if !isErratum {
			if len(task.Labels) != 0 {
				t.Errorf("%s: no erratum, yet other labels %v", task.View.ID, task.Labels)
			}
			continue
		}
		v1, ok := task.Labels[MedCalcDataset+"@v1.0"]
		if task.Truth.Answer != e.Correct || !ok || v1.Answer != e.Label || v1.LabelSet != MedCalcDataset+"@v1.0" {
			t.Errorf("%s: truth %q, v1.0 %q (%v), want %q and %q", task.View.ID, task.Truth.Answer, v1.Answer, ok, e.Correct, e.Label)
		}
	}
	if ix[medCalcID(errata[0].Row)] == nil {
		t.Errorf("erratum row %d is not in the test split", errata[0].Row)
	}
	train, err := Load(t.Context(), Source{Dataset: MedCalcDataset, Split: "train", DataRoot: root})
	if err != nil || len(train) != 0 {
		t.Errorf("train split: %d tasks, %v", len(train), err)
	}
	if _, err := Load(t.Context(), Source{Dataset: MedCalcDataset, Split: "dev", DataRoot: root}); err == nil {
		t.Error("unknown split loaded")
	}
}

func TestMedCalcReferenceHidesExplanation(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(dataRoot(t), medCalcFile))
	if err != nil {
		t.Fatal(err)
	}
	all := loadAllMedCalc(t)
	// The first explanation sentence of a row must not leak into its reference.
	if !strings.Contains(string(raw), "Cockcroft-Gault") {
		t.Skip("unexpected data")
	}
	for _, task := range all {
		if strings.Contains(task.Reference, "Plugging") || strings.Contains(task.Reference, task.View.Context) {
			t.Fatalf("%s: reference carries explanation or note text", task.View.ID)
		}
	}
}

func TestMedCalcMalformedRow(t *testing.T) {
	good := `1,2,Creatinine Clearance (Cockcroft-Gault Equation),lab,decimal,n1,Extracted,"A note.",What is it?,"{'sex': 'Male', 'age': [50, 'years'], 'weight': [70.0, 'kg'], 'height': [170.0, 'cm'], 'creatinine': [1.0, 'mg/dL']}",80.0,76.0,84.0,x`
	cases := []struct {
		name, row, field string
	}{
		{"lower limit", strings.Replace(good, ",76.0,", ",low,", 1), "Lower Limit"},
		{"calculator id", strings.Replace(good, "1,2,", "1,999,", 1), "Calculator ID"},
		{"entities", strings.Replace(good, `"{'sex'`, `"['sex'`, 1), "Relevant Entities"},
		{"output type", strings.Replace(good, ",decimal,", ",fraction,", 1), "Output Type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mc.csv")
			body := strings.Join(medCalcHeader, ",") + "\n" + good + "\n" + c.row + "\n"
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := readMedCalc(context.Background(), path)
			if err == nil {
				t.Fatal("malformed row accepted")
			}
			if !strings.Contains(err.Error(), path+":3:") || !strings.Contains(err.Error(), c.field) {
				t.Errorf("error %q does not name %s:3 and field %q", err, path, c.field)
			}
		})
	}
	t.Run("good", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "mc.csv")
		if err := os.WriteFile(path, []byte(strings.Join(medCalcHeader, ",")+"\n"+good+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ts, err := readMedCalc(context.Background(), path)
		if err != nil || len(ts) != 1 || ts[0].View.ID != "medcalcbench-1" || *ts[0].Truth.Lower != 76 {
			t.Fatalf("got %+v, %v", ts, err)
		}
	})
}

func TestSummarize(t *testing.T) {
	mk := func(ds, split, cat string, at schemas.AnswerType) Task {
		return Task{View: schemas.TaskView{Dataset: ds, Split: split, Category: cat, AnswerType: at}}
	}
	s := Summarize([]Task{
		mk("b", "test", "x", schemas.AnswerNumber),
		mk("a", "test", "y", schemas.AnswerDate),
		mk("b", "test", "x", schemas.AnswerInteger),
		mk("b", "test", "z", schemas.AnswerNumber),
		mk("a", "train", "y", schemas.AnswerDate),
	})
	if len(s.Groups) != 3 {
		t.Fatalf("groups %+v", s.Groups)
	}
	g := s.Groups[2]
	if s.Groups[0].Dataset != "a" || s.Groups[1].Split != "train" || g.Dataset != "b" || g.Count != 3 ||
		g.Categories["x"] != 2 || g.Categories["z"] != 1 || g.AnswerTypes[schemas.AnswerNumber] != 2 {
		t.Fatalf("summary %+v", s)
	}
}

func TestPySections(t *testing.T) {
	src := "# @section a\nx = 1\n# @section b\n# @uses a\ny = x\n# @section c\n# @uses b\nz = y\n"
	s, err := parsePySections(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.program("c")
	if err != nil || got != "x = 1\n\n\ny = x\n\n\nz = y\n" {
		t.Fatalf("program %q, %v", got, err)
	}
	if _, err := s.program("nope"); err == nil {
		t.Error("unknown section accepted")
	}
	if _, err := parsePySections("# @section a\n# @section a\n"); err == nil {
		t.Error("duplicate section accepted")
	}
}
