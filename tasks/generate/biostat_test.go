package generate

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

// generateInto runs the named generator into a fresh temporary library
// and returns the dataset's agent-tree directory with its train and test
// tasks (libFile finds the task files).
func generateInto(t *testing.T, name string) (dir string, train, test []tasks.Task) {
	t.Helper()
	lib := t.TempDir()
	dir = filepath.Join(tasks.AgentTree(lib), name)
	if err := Generate(t.Context(), dataRoot(t), lib, []string{name}); err != nil {
		t.Fatal(err)
	}
	for _, split := range []string{"train", "test"} {
		ts, err := tasks.Load(t.Context(), tasks.Source{Dataset: name, Split: split, LibraryDir: lib})
		if err != nil {
			t.Fatal(err)
		}
		if split == "train" {
			train = ts
		} else {
			test = ts
		}
	}
	return dir, train, test
}

// checkSplits asserts the structural properties every generated dataset
// must have and logs counts per split and category.
func checkSplits(t *testing.T, dataset string, train, test []tasks.Task) {
	t.Helper()
	if len(train) == 0 || len(test) == 0 {
		t.Fatalf("%s: %d train, %d test tasks", dataset, len(train), len(test))
	}
	ids := map[string]bool{}
	questions := map[string]string{}
	counts := map[string][2]int{}
	for i, ts := range [][]tasks.Task{train, test} {
		for _, task := range ts {
			v := task.View
			if ids[v.ID] {
				t.Errorf("duplicate id %s", v.ID)
			}
			ids[v.ID] = true
			if v.Dataset != dataset || v.Category == "" || v.Question == "" || len(v.Resources) == 0 {
				t.Errorf("%s: incomplete view %+v", v.ID, v)
			}
			if task.Reference == "" || task.Truth.Answer == "" {
				t.Errorf("%s: no reference or answer", v.ID)
			}
			if strings.Contains(task.Reference, task.Truth.Answer) && len(task.Truth.Answer) > 6 {
				t.Errorf("%s: reference embeds the answer %s", v.ID, task.Truth.Answer)
			}
			if s, ok := questions[v.Question]; ok && s != v.Split {
				t.Errorf("question in both splits: %s", v.Question)
			}
			questions[v.Question] = v.Split
			c := counts[v.Category]
			c[i]++
			counts[v.Category] = c
		}
	}
	cats := make([]string, 0, len(counts))
	for c := range counts {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	var b strings.Builder
	for _, c := range cats {
		fmt.Fprintf(&b, "\n  %-22s train %5d  test %5d", c, counts[c][0], counts[c][1])
	}
	t.Logf("%s: %d train, %d test, %d categories:%s", dataset, len(train), len(test), len(cats), b.String())
}

// libFile is the path of a dataset's file f given the dataset's agent-tree
// directory (generateInto): task files are in the verifier tree.
func libFile(agentDir, f string) string {
	if schemas.VerifierOnlyFile(f) {
		lib := filepath.Dir(filepath.Dir(agentDir))
		return filepath.Join(tasks.VerifierTree(lib), filepath.Base(agentDir), f)
	}
	return filepath.Join(agentDir, f)
}

// checkDeterministic generates the dataset twice and compares task files.
func checkDeterministic(t *testing.T, dataset string) {
	t.Helper()
	a, _, _ := generateInto(t, dataset)
	b, _, _ := generateInto(t, dataset)
	for _, f := range []string{"train.jsonl", "test.jsonl"} {
		x, err := os.ReadFile(libFile(a, f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(libFile(b, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s/%s differs between two generations", dataset, f)
		}
	}
}

// localCheck compares a reference's stdout with the truth: the last
// non-empty line, as a number within the truth's bounds or tolerance, or
// an exact integer.
func localCheck(tr tasks.Truth, stdout string) error {
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	got := strings.TrimSpace(lines[len(lines)-1])
	switch tr.Type {
	case schemas.AnswerInteger:
		if got != tr.Answer {
			return fmt.Errorf("got %q, want integer %s", got, tr.Answer)
		}
	case schemas.AnswerNumber:
		g, err := strconv.ParseFloat(got, 64)
		if err != nil {
			return fmt.Errorf("answer %q is not a number", got)
		}
		if tr.Lower != nil || tr.Upper != nil {
			if (tr.Lower != nil && g < *tr.Lower) || (tr.Upper != nil && g > *tr.Upper) {
				return fmt.Errorf("%s outside [%v, %v]", got, deref(tr.Lower), deref(tr.Upper))
			}
			return nil
		}
		w, err := strconv.ParseFloat(tr.Answer, 64)
		if err != nil {
			return fmt.Errorf("truth %q is not a number", tr.Answer)
		}
		if math.Abs(g-w) > tr.Tolerance*math.Abs(w)+1e-9 {
			return fmt.Errorf("got %s, want %s (rel tol %g)", got, tr.Answer, tr.Tolerance)
		}
	default:
		return fmt.Errorf("unexpected answer type %q", tr.Type)
	}
	return nil
}

// runRefs runs each reference with Debian's python, MEDGYM_DATA_DIR set to
// dataDir, with bounded parallelism; it returns stdout (or an error text).
func runRefs(t *testing.T, ts []tasks.Task, dataDir string) map[string]string {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s", python)
	}
	out := make(map[string]string, len(ts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan *tasks.Task)
	for range max(2, runtime.NumCPU()) {
		wg.Go(func() {
			for task := range work {
				cmd := exec.CommandContext(t.Context(), python, "-c", task.Reference)
				cmd.Env = append(os.Environ(), "MEDGYM_DATA_DIR="+dataDir, "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1")
				var stderr strings.Builder
				cmd.Stderr = &stderr
				b, err := cmd.Output()
				if err != nil {
					t.Errorf("%s (%s): reference failed: %v\n%s", task.View.ID, task.View.Category, err, stderr.String())
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

// sampleSpread keeps up to n tasks per category, spread over the category
// (deterministic).
func sampleSpread(ts []tasks.Task, n int) []tasks.Task {
	by := map[string][]tasks.Task{}
	var cats []string
	for _, task := range ts {
		c := task.View.Category
		if _, ok := by[c]; !ok {
			cats = append(cats, c)
		}
		by[c] = append(by[c], task)
	}
	var out []tasks.Task
	for _, c := range cats {
		list := by[c]
		step := max(1, len(list)/n)
		for i := 0; i < len(list) && i/step < n; i += step {
			out = append(out, list[i])
		}
	}
	return out
}

// checkSolvable runs a sample of references per category (perCat, or
// perCatShort with -short, or $MEDGYM_REF_SAMPLE) and checks them.
func checkSolvable(t *testing.T, dir string, ts []tasks.Task, perCat, perCatShort int) {
	t.Helper()
	n := perCat
	if testing.Short() {
		n = perCatShort
	}
	if v, err := strconv.Atoi(os.Getenv("MEDGYM_REF_SAMPLE")); err == nil && v > 0 {
		n = v // e.g. MEDGYM_REF_SAMPLE=1000000 runs every reference
	}
	s := sampleSpread(ts, n)
	outs := runRefs(t, s, dir)
	pass := 0
	for _, task := range s {
		if err := localCheck(task.Truth, outs[task.View.ID]); err != nil {
			t.Errorf("%s (%s): %v\nquestion: %s", task.View.ID, task.View.Category, err, task.View.Question)
			continue
		}
		pass++
	}
	t.Logf("references: %d/%d passed", pass, len(s))
}

func TestBiostatTasks(t *testing.T) {
	dir, train, test := generateInto(t, BiostatDataset)
	checkSplits(t, BiostatDataset, train, test)
	if _, err := os.Stat(filepath.Join(dir, "LICENSE.md")); err != nil {
		t.Error(err)
	}
	checkSolvable(t, dir, append(train, test...), 2, 1)
}

func TestBiostatDeterministic(t *testing.T) {
	checkDeterministic(t, BiostatDataset)
}
