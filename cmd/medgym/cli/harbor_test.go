package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/medgym/medgym/cmd/medgym/internal/harbor"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// TestExportHarborCanary: `medgym export --format harbor` over a library
// whose answer key holds a canary writes one Harbor task folder per task,
// and the canary is only where Harbor never shows it to an agent: tests/
// (the verifier's image, built and started after the agent's container
// stopped) and solution/ (the reference, copied in for the oracle agent
// only). The agent's image context (environment/, with the task's data
// file) and instruction.md hold the question and not the canary.
func TestExportHarborCanary(t *testing.T) {
	const canary = "MEDGYM-CANARY-2207"
	lib := answerKeyLibrary(t, canary)
	data := filepath.Join(lib, "agent", "eicu", "patient.csv")
	if err := os.WriteFile(data, []byte("patientunitstayid,age\n1,70\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"export", "--format", "harbor", "--library", lib, "--dataset", "eicu", "--split", "test",
		"--image", "medgym/sandbox:x", "--verifier-image", "medgym/harbor-verifier:y", "--out", out}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	var folders []string
	for _, e := range must(os.ReadDir(out)) {
		folders = append(folders, e.Name())
	}
	if !slices.Equal(folders, []string{"eicu-canary-0", "eicu-canary-1"}) {
		t.Fatalf("task folders %v", folders)
	}
	dir := filepath.Join(out, "eicu-canary-0")
	var seen []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := filepath.ToSlash(must(filepath.Rel(dir, p)))
		seen = append(seen, rel)
		b := must(os.ReadFile(p))
		allowed := strings.HasPrefix(rel, "tests/") || strings.HasPrefix(rel, "solution/")
		if bytes.Contains(b, []byte(canary)) && !allowed {
			t.Errorf("%s holds the canary", rel)
		}
		return nil
	})
	want := []string{"environment/Dockerfile", "environment/data/eicu/patient.csv", "instruction.md",
		"solution/solution.py", "solution/solve.sh", "task.toml", "tests/Dockerfile", "tests/task.json", "tests/test.sh"}
	slices.Sort(seen)
	if !slices.Equal(seen, want) {
		t.Errorf("files %v\nwant %v", seen, want)
	}
	// Positive controls: the search finds the canary in the truth, and the
	// question in the instruction.
	if !bytes.Contains(must(os.ReadFile(filepath.Join(dir, "tests", "task.json"))), []byte(canary)) {
		t.Error("tests/task.json lacks the canary: the search above proves nothing")
	}
	instr := string(must(os.ReadFile(filepath.Join(dir, "instruction.md"))))
	for _, s := range []string{"What is the secret code of this task?", "/data/eicu", harbor.AnswerFile} {
		if !strings.Contains(instr, s) {
			t.Errorf("instruction.md lacks %q:\n%s", s, instr)
		}
	}
	toml := string(must(os.ReadFile(filepath.Join(dir, "task.toml"))))
	for _, s := range []string{`name = "medgym/eicu-canary-0"`, `environment_mode = "separate"`, `network_mode = "no-network"`, `artifacts = ["/work"]`} {
		if !strings.Contains(toml, s) {
			t.Errorf("task.toml lacks %s:\n%s", s, toml)
		}
	}
	if df := string(must(os.ReadFile(filepath.Join(dir, "environment", "Dockerfile")))); !strings.HasPrefix(df, "FROM medgym/sandbox:x\n") {
		t.Errorf("environment/Dockerfile:\n%s", df)
	}
	if df := string(must(os.ReadFile(filepath.Join(dir, "tests", "Dockerfile")))); !strings.HasPrefix(df, "FROM medgym/harbor-verifier:y\n") {
		t.Errorf("tests/Dockerfile:\n%s", df)
	}

	// --harbor-network compose: the containers leave the network through a
	// compose file beside each Dockerfile, task.toml's policy is public.
	out2 := t.TempDir()
	if err := Run(context.Background(), append(args[:len(args)-1], out2, "--harbor-network", "compose", "--task", "eicu-canary-1"), &stdout, &stderr); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	for _, f := range []string{"environment/docker-compose.yaml", "tests/docker-compose.yaml"} {
		if b := string(must(os.ReadFile(filepath.Join(out2, "eicu-canary-1", f)))); !strings.Contains(b, "network_mode: none") {
			t.Errorf("%s:\n%s", f, b)
		}
	}
	if _, err := os.Stat(filepath.Join(out2, "eicu-canary-0")); !os.IsNotExist(err) {
		t.Errorf("--task eicu-canary-1 also wrote eicu-canary-0 (%v)", err)
	}
}

// TestHarborVerify: harbor-verify scores the /work a trial left with the
// verifier's rules: the right answer 1, a wrong or missing one 0, with
// Harbor's reward.json (numbers only) and medgym.json beside it; an answer
// file larger than a sandbox run may return is a wrong answer.
func TestHarborVerify(t *testing.T) {
	const canary = "MEDGYM-CANARY-2208"
	lib := answerKeyLibrary(t, canary)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"export", "--format", "harbor", "--library", lib, "--dataset", "eicu", "--split", "test", "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	task := filepath.Join(out, "eicu-canary-0", "tests", "task.json")
	for _, c := range []struct {
		name, answer string
		write        bool
		reward       float64
		outcome      schemas.Outcome
	}{
		{"right", "working...\n" + canary + "\n", true, 1, schemas.OutcomeCorrect},
		{"wrong", "MEDGYM-CANARY-0000\n", true, 0, schemas.OutcomeIncorrect},
		{"missing", "", false, 0, schemas.OutcomeIncorrect},
		// Larger than a sandbox run may return: scored as wrong, not a verifier error.
		{"too large", strings.Repeat("x", schemas.MaxOutputFileBytes) + "\n" + canary + "\n", true, 0, schemas.OutcomeIncorrect},
	} {
		t.Run(c.name, func(t *testing.T) {
			work, logs := t.TempDir(), filepath.Join(t.TempDir(), "verifier")
			if c.write {
				if err := os.WriteFile(filepath.Join(work, "answer.txt"), []byte(c.answer), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var stdout, stderr bytes.Buffer
			if err := Run(context.Background(), []string{"harbor-verify", "--task", task, "--work", work, "--out", logs}, &stdout, &stderr); err != nil {
				t.Fatalf("harbor-verify: %v\n%s", err, stderr.String())
			}
			var reward map[string]float64
			if err := json.Unmarshal(must(os.ReadFile(filepath.Join(logs, "reward.json"))), &reward); err != nil {
				t.Fatal(err)
			}
			var res harbor.Result
			if err := json.Unmarshal(must(os.ReadFile(filepath.Join(logs, "medgym.json"))), &res); err != nil {
				t.Fatal(err)
			}
			if len(reward) != 1 || reward["reward"] != c.reward || res.Outcome != c.outcome || res.TaskID != "eicu-canary-0" {
				t.Errorf("reward.json %v, medgym.json %+v: want reward %g, outcome %s", reward, res, c.reward, c.outcome)
			}
		})
	}
}

// TestExportHarborSkipsHarnessTasks: a task whose code runs inside a
// harness the agent never sees is left out, and the export says so.
func TestExportHarborSkipsHarnessTasks(t *testing.T) {
	lib := answerKeyLibrary(t, "MEDGYM-CANARY-2209")
	ts, err := tasks.Load(context.Background(), tasks.Source{Dataset: "eicu", Split: "test", LibraryDir: lib})
	if err != nil {
		t.Fatal(err)
	}
	ts[1].View.Harness = "def f():\n    " + schemas.HarnessMarker + "\nprint(f())\n"
	if err := tasks.WriteTasks(filepath.Join(tasks.VerifierTree(lib), "eicu", "test.jsonl"), ts); err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.WriteManifests(lib); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"export", "--format", "harbor", "--library", lib, "--dataset", "eicu", "--split", "test", "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	var folders []string
	for _, e := range must(os.ReadDir(out)) {
		folders = append(folders, e.Name())
	}
	if !slices.Equal(folders, []string{"eicu-canary-0"}) || !strings.Contains(stdout.String(), "1 Harbor tasks") ||
		!strings.Contains(stderr.String(), "1 tasks skipped") {
		t.Errorf("folders %v, stdout %q, stderr %q", folders, stdout.String(), stderr.String())
	}
}
