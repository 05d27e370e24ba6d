package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/cmd/medgym/internal/report"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/tasks"
)

// baselineLibrary writes a library whose eicu test tasks have the truths
// given (integers; "null" marks an unanswerable task that offers
// abstention) and whose treqs test tasks are predictions tasks.
func baselineLibrary(t *testing.T, truths []string) string {
	t.Helper()
	lib := t.TempDir()
	write := func(ds string, ts []tasks.Task) {
		for _, d := range []string{tasks.AgentTree(lib), tasks.VerifierTree(lib)} {
			if err := os.MkdirAll(filepath.Join(d, ds), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := tasks.WriteTasks(filepath.Join(tasks.VerifierTree(lib), ds, "test.jsonl"), ts); err != nil {
			t.Fatal(err)
		}
	}
	var ts []tasks.Task
	for i, a := range truths {
		tr := tasks.Truth{Type: schemas.AnswerInteger, Answer: a}
		if a == "null" {
			tr = tasks.Truth{Type: schemas.AnswerInteger, Answer: a, Abstention: true, Unanswerable: true}
		}
		ts = append(ts, tasks.Task{View: schemas.TaskView{ID: fmt.Sprintf("eicu-b-%d", i), Dataset: "eicu", Split: "test", Question: "How many?",
			AnswerType: schemas.AnswerInteger}, Truth: tr, Reference: "print(" + a + ")"})
	}
	write("eicu", ts)
	write("treqs", []tasks.Task{{View: schemas.TaskView{ID: "treqs-p-0", Dataset: "treqs", Split: "test", Question: "Predict."},
		Truth: tasks.Truth{Type: schemas.AnswerPredictions, Answer: "labels.csv"}, Reference: "pass"}})
	if _, err := tasks.WriteManifests(lib); err != nil {
		t.Fatal(err)
	}
	return lib
}

// TestConstantBaselines: each dataset's best constant answer over the run's
// distinct tasks, checked by the verifier's own rule: "1" is the truth of 3
// of the 6 tasks (numbers are compared as numbers, so "1.0" would do as
// well); on a task that offers abstention only an unanswerable one counts
// "null" a success; a predictions dataset gets a note; the report prints the
// baseline beside the model's success.
func TestConstantBaselines(t *testing.T) {
	lib := baselineLibrary(t, []string{"1", "1", "2", "3", "1", "null"})
	var rows []parquet.Row
	for i := range 6 {
		for k := range 2 { // two samples of each task: the baseline counts tasks, not episodes
			rows = append(rows, parquet.Row{RunID: "r", EpisodeID: fmt.Sprintf("e%d-%d", i, k), Dataset: "eicu", Split: "test",
				TaskID: fmt.Sprintf("eicu-b-%d", i), Outcome: string(schemas.OutcomeIncorrect), VerifierVersion: "1.1.0+strict.x"})
		}
	}
	rows[0].Outcome = string(schemas.OutcomeCorrect)
	rows = append(rows, parquet.Row{RunID: "r", EpisodeID: "p", Dataset: "treqs", Split: "test", TaskID: "treqs-p-0", Outcome: "incorrect"},
		parquet.Row{RunID: "r", EpisodeID: "m", Dataset: "mimic_iii", Split: "test", TaskID: "mimic_iii-x", Outcome: "incorrect"})
	got := constantBaselines(context.Background(), tasks.NewCache(t.TempDir(), "", lib), rows)
	if len(got) != 3 {
		t.Fatalf("baselines %+v", got)
	}
	e, m, p := got[0], got[1], got[2]
	if e.Dataset != "eicu" || e.Answer != "1" || e.Tasks != 6 || e.Hits != 3 || e.Note != "" {
		t.Fatalf("eicu baseline %+v, want 1 on 3 of 6 tasks", e)
	}
	if m.Dataset != "mimic_iii" || m.Note == "" || p.Dataset != "treqs" || !strings.Contains(p.Note, "no constant answer") {
		t.Fatalf("notes: %+v %+v", m, p)
	}
	md := string(report.Markdown(report.Build("r", rows, report.Options{Baselines: got})))
	if !strings.Contains(md, "| eicu | 8.3% | `1` | 6 | 50.0% |") {
		t.Fatalf("the report's baseline table:\n%s", md)
	}

	// More unanswerable tasks than any one truth: "null" (abstaining on all)
	// is the best constant, counted only where the task is unanswerable.
	lib = baselineLibrary(t, []string{"null", "null", "null", "4", "5"})
	rows = rows[:0]
	for i := range 5 {
		rows = append(rows, parquet.Row{Dataset: "eicu", Split: "test", TaskID: fmt.Sprintf("eicu-b-%d", i)})
	}
	if b := constantBaselines(context.Background(), tasks.NewCache(t.TempDir(), "", lib), rows)[0]; b.Answer != schemas.AbstainAnswer || b.Hits != 3 {
		t.Fatalf("abstention baseline %+v, want null on 3 of 5", b)
	}
}
