package systemtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"

	"github.com/medgym/medgym/tasks/taskstest"
)

// TestBioCoderGraded plays BioCoder tasks through the whole pipeline: the
// agent's function runs inside the task's context in the sandbox, and
// strict mode compares its output with the reference solution's, run the
// same way. Upstream mode accepts a silent program against a silent
// reference; strict mode accepts nothing there.
func TestBioCoderGraded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := taskstest.UpstreamFolder(t, "upstream-biocoder", "biocoder", "test_tasks.jsonl")
	// Before reference-outputs: the loader marks the outputs missing.
	ts, err := tasks.LoadUpstream(ctx, tasks.Source{Dataset: "biocoder", Split: "test", TasksDir: dir})
	if err != nil || len(ts) != 3 || ts[0].Truth.Extra["reference_output"] != "missing" || ts[0].View.Harness == "" {
		t.Fatalf("before: %v tasks, %v", len(ts), err)
	}
	out, errOut, err := runCLI(t, "tasks", "reference-outputs", "--tasks-dir", dir)
	if err != nil || !strings.Contains(out, "3 biocoder reference outputs") || !strings.Contains(errOut, "biocoder-2-") ||
		!strings.Contains(errOut, "prints nothing") {
		t.Fatalf("reference-outputs: %v\n%s\n%s", err, out, errOut)
	}
	ts, err = tasks.LoadUpstream(ctx, tasks.Source{Dataset: "biocoder", Split: "test", TasksDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].Truth.Extra["reference_output"] != "ok" || strings.Count(ts[0].Truth.Answer, "\n") != 3 || ts[2].Truth.Answer != "" {
		t.Fatalf("after: %+v / %+v", ts[0].Truth, ts[2].Truth)
	}

	right := "def gc_content(seq):\n    return (seq.count('G') + seq.count('C')) / len(seq) if seq else 0.0"
	wrong := "def gc_content(seq):\n    return (seq.count('A') + seq.count('T')) / len(seq) if seq else 0.0"
	silent := "def check_alphabet(seq):\n    pass"
	f := baseFlags(t)
	f.TasksDir, f.Datasets, f.Policy, f.Model, f.MaxTurns = dir, "biocoder", "openai", "fake-model", 1
	for _, c := range []struct {
		name, task, code string
		upstream         bool
		outcome          schemas.Outcome
	}{
		// Asked for by upstream's index alone: the stored task id carries the idx.
		{"right function", "biocoder-0", right, false, schemas.OutcomeCorrect},
		{"wrong function", ts[0].View.ID, wrong, false, schemas.OutcomeTurnLimit},
		{"silent program, strict", ts[2].View.ID, silent, false, schemas.OutcomeTurnLimit},
		{"silent program, upstream", ts[2].View.ID, silent, true, schemas.OutcomeCorrect},
	} {
		f.TaskIDs, f.UpstreamCompat = c.task, c.upstream
		f.RunID = "bc-" + strings.NewReplacer(" ", "-", ",", "").Replace(c.name)
		r := playScripted(t, ctx, f, []string{codeAction(c.code)}, c.outcome)
		if !tasks.MatchID(r.TaskID, c.task) || !strings.HasPrefix(r.TaskID, "biocoder-") || len(r.TaskID) < len("biocoder-0-")+16 {
			t.Fatalf("%s: stored task id %q", c.name, r.TaskID)
		}
		turn := r.Turns[0]
		if turn.Action != "validate_code" || turn.ExecStatus != "ok" {
			t.Fatalf("%s: turn %+v", c.name, turn)
		}
		if c.name == "right function" && turn.Stdout != ts[0].Truth.Answer {
			t.Fatalf("%s: the spliced program printed %q, the reference %q", c.name, turn.Stdout, ts[0].Truth.Answer)
		}
		for _, m := range r.Messages {
			if strings.Contains(m.Content, "random.seed(7)") || strings.Contains(m.Content, "<<insert solution here>>") {
				t.Fatalf("%s: the context code reached the prompt: %q", c.name, m.Content)
			}
		}
	}
}
