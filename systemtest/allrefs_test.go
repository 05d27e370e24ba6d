package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/tasks"
)

// TestEveryReferenceSolution runs every reference solution of every
// generated dataset (both splits; ~19k programs, a few minutes) in one
// Python process per split (testdata/runrefs.py exec()s each in a fresh
// namespace and directory) and checks each output with the strict
// verifier. Opt in with MEDGYM_ALL_REFS=1 (`make verify-all`); CI runs a
// seeded sample of every dataset through the real sandbox instead
// (TestReferenceSolutionsPassEveryDataset). MedCalc-Bench references are
// all checked by the tasks module's own tests.
func TestEveryReferenceSolution(t *testing.T) {
	if os.Getenv("MEDGYM_ALL_REFS") != "1" {
		t.Skip("set MEDGYM_ALL_REFS=1 (make verify-all)")
	}
	lib := os.Getenv("MEDGYM_LIBRARY")
	if lib == "" {
		lib = filepath.Join(repoRoot(t), "build", "library")
	}
	dir := t.TempDir()
	for _, ds := range []string{"mimic_iii", "eicu", "treqs", "biostat", "npowerai", "clinical_ml", "ehrsql2024"} {
		for _, sp := range []string{"train", "test"} {
			cmd := exec.Command("/usr/bin/python3", "-W", "ignore", "testdata/runrefs.py", lib, ds, sp, filepath.Join(dir, ds+"."+sp+".jsonl"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s/%s: %v\n%s", ds, sp, err, out)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, p := range files {
		var ds, sp string
		base := filepath.Base(p)
		base = base[:len(base)-len(".jsonl")]
		for i := len(base) - 1; i >= 0; i-- {
			if base[i] == '.' {
				ds, sp = base[:i], base[i+1:]
				break
			}
		}
		ts, err := tasks.Load(context.Background(), tasks.Source{Dataset: ds, Split: sp, LibraryDir: lib, DataRoot: dataRoot(t)})
		if err != nil {
			t.Fatal(err)
		}
		ix := tasks.NewIndex(ts)
		f, _ := os.Open(p)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		pass, fail := 0, 0
		for sc.Scan() {
			var r struct {
				ID     string            `json:"id"`
				OK     bool              `json:"ok"`
				Stdout string            `json:"stdout"`
				Files  map[string]string `json:"files"`
			}
			_ = json.Unmarshal(sc.Bytes(), &r)
			task, ok := ix[r.ID]
			if !ok {
				t.Fatalf("%s: unknown task %s", ds, r.ID)
			}
			st := schemas.StatusOK
			if !r.OK {
				st = schemas.StatusError
			}
			c := verify.CheckOutput(verify.Strict, ds, task.Truth, schemas.ExecResult{Status: st, Stdout: r.Stdout, Files: r.Files})
			// An abstention is accepted as final on any task that offers
			// it; a reference abstains exactly on the unanswerable ones.
			abstained := strings.EqualFold(strings.TrimSpace(c.Answer), schemas.AbstainAnswer)
			if c.Accepted && (!task.Truth.Abstention || abstained == task.Truth.Unanswerable) {
				pass++
			} else {
				fail++
				if fail <= 5 {
					t.Logf("%s: %s | %q", r.ID, c.Verdict, tail(r.Stdout, 200))
				}
			}
		}
		f.Close()
		t.Logf("%s/%s: %d passed, %d failed", ds, sp, pass, fail)
		if fail > 0 {
			t.Errorf("%s/%s: %d failed", ds, sp, fail)
		}
	}
}
