package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/medgym/medgym/tasks/taskstest"
)

// TestTasksUpstreamFolder runs the tasks commands on an upstream folder as
// a new user would: no --split, no --dataset, JSON output, show by
// upstream's index.
func TestTasksUpstreamFolder(t *testing.T) {
	// Only medcalcbench/test_tasks.jsonl: upstream ships no train file for it.
	dir := taskstest.UpstreamFolder(t, "upstream", "medcalcbench", "test_tasks.jsonl")
	for _, args := range [][]string{
		{"tasks", "stats", "--tasks-dir", dir, "--dataset", "medcalcbench"},
		{"tasks", "stats", "--tasks-dir", dir},
	} {
		out, errOut, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(out, "medcalcbench   test        4 tasks") || !strings.Contains(out, "total 4 tasks") {
			t.Errorf("%v: stdout %q", args, out)
		}
		if !strings.Contains(errOut, "medcalcbench: no train split") || !strings.Contains(errOut, "train_tasks_all.jsonl is missing") {
			t.Errorf("%v: stderr %q does not name the missing split", args, errOut)
		}
	}
	// A split asked for explicitly must exist.
	if _, _, err := runCLI(t, "tasks", "stats", "--tasks-dir", dir, "--split", "train"); err == nil ||
		!strings.Contains(err.Error(), "train_tasks_all.jsonl") {
		t.Errorf("explicit missing split: %v", err)
	}
	// No upstream folder at all.
	if _, _, err := runCLI(t, "tasks", "stats", "--tasks-dir", t.TempDir()); err == nil ||
		!strings.Contains(err.Error(), "no upstream dataset folder") {
		t.Errorf("empty tasks dir: %v", err)
	}

	out, _, err := runCLI(t, "tasks", "list", "--tasks-dir", dir, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []taskListRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("list --format json is not JSON: %v\n%s", err, out)
	}
	if len(rows) != 4 || rows[3].ID != "medcalcbench-3-row1032" || rows[3].AnswerType != "integer" ||
		rows[3].Upstream != "medcalcbench/test_tasks.jsonl line 4, index 3, Row Number 1032" {
		t.Errorf("list rows %+v", rows)
	}
	if strings.Contains(out, "Ground Truth") || strings.Contains(out, `"11"`) {
		t.Errorf("list leaks the answer: %s", out)
	}

	out, _, err = runCLI(t, "tasks", "show", "--tasks-dir", dir, "medcalcbench-3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "id: medcalcbench-3-row1032\n") || !strings.Contains(out, "--- upstream ---\nmedcalcbench/test_tasks.jsonl line 4, index 3, Row Number 1032") {
		t.Errorf("show: %s", out)
	}
	if _, _, err := runCLI(t, "tasks", "list", "--tasks-dir", dir, "--format", "xml"); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Errorf("bad format: %v", err)
	}
}

// TestPreflightSelectsAsTheDispatcher: `medgym run` counts a run's
// episodes with the dispatcher's own selection (tasks.Select), so an
// upstream task named by its <dataset>-<index> prefix counts, and a run
// over --max-episodes is refused before anything starts (the count had
// matched ids exactly and found 0 tasks, so the check never fired).
func TestPreflightSelectsAsTheDispatcher(t *testing.T) {
	dir := taskstest.UpstreamFolder(t, "upstream", "medcalcbench", "test_tasks.jsonl")
	_, _, err := runCLI(t, "run", "--tasks-dir", dir, "--dataset", "medcalcbench", "--split", "test", "--task", "medcalcbench-2,medcalcbench-3",
		"--samples", "2", "--max-episodes", "3", "--policy", "openai", "--llm-url", "http://127.0.0.1:1/v1", "--model", "m",
		"--state", t.TempDir(), "--store", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "2 tasks × 2 samples is more than the limit of 3 episodes") {
		t.Fatalf("run of 2 upstream tasks × 2 samples over --max-episodes 3: %v", err)
	}
}
