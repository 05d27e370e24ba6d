package generate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

// TestEHRSQLMIMICIII and TestEHRSQLEICU generate a dataset twice and check
// determinism, the splits, the task fields and that sampled references
// solve their tasks.
func TestEHRSQLMIMICIII(t *testing.T) { testEHRSQL(t, "mimic_iii", generateMIMICIII) }

func TestEHRSQLEICU(t *testing.T) { testEHRSQL(t, "eicu", generateEICU) }

func testEHRSQL(t *testing.T, dataset string, gen Generator) {
	root := dataRoot(t)
	if _, err := os.Stat(filepath.Join(root, "ehrsql-templates")); err != nil {
		t.Skipf("no EHRSQL templates under %s", root)
	}
	if ehrRaceBuild {
		t.Skip("generation under the race detector takes many minutes (transpiled SQLite); run without -race")
	}
	t.Parallel()
	dirs := []string{t.TempDir(), t.TempDir()}
	start := time.Now()
	if err := gen(t.Context(), root, dirs[0]); err != nil {
		t.Fatalf("generate: %v", err)
	}
	t.Logf("%s: generated in %s", dataset, time.Since(start).Round(time.Millisecond))
	if !testing.Short() {
		if err := gen(t.Context(), root, dirs[1]); err != nil {
			t.Fatalf("generate again: %v", err)
		}
		for _, f := range []string{"train.jsonl", "test.jsonl", dataset + ".db", "LICENSE.md"} {
			a, b := fileSHA(t, filepath.Join(dirs[0], f)), fileSHA(t, filepath.Join(dirs[1], f))
			if a != b {
				t.Errorf("%s differs between two generations: %s vs %s", f, a, b)
			}
		}
	}
	src := tasks.Source{Dataset: dataset, LibraryDir: filepath.Dir(dirs[0])}
	// loadLibrary reads <LibraryDir>/verifier/<dataset>; link the temp dir there.
	lib := t.TempDir()
	if err := os.Mkdir(tasks.VerifierTree(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dirs[0], filepath.Join(tasks.VerifierTree(lib), dataset)); err != nil {
		t.Fatal(err)
	}
	src.LibraryDir = lib
	splits := map[string][]tasks.Task{}
	for _, split := range []string{"train", "test"} {
		src.Split = split
		ts, err := tasks.Load(t.Context(), src)
		if err != nil {
			t.Fatalf("load %s: %v", split, err)
		}
		splits[split] = ts
	}
	checkEHRTasks(t, dataset, splits)
	checkEHRReferences(t, dataset, dirs[0], append(splits["train"], splits["test"]...))
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func checkEHRTasks(t *testing.T, dataset string, splits map[string][]tasks.Task) {
	t.Helper()
	ids := map[string]bool{}
	questions := map[string]string{}
	cats := map[string]int{}
	types := map[schemas.AnswerType]int{}
	for split, ts := range splits {
		if len(ts) < 200 {
			t.Errorf("%s: only %d tasks", split, len(ts))
		}
		for _, tk := range ts {
			v := tk.View
			if ids[v.ID] {
				t.Errorf("duplicate id %s", v.ID)
			}
			ids[v.ID] = true
			if other, ok := questions[v.Question]; ok && other != split {
				t.Errorf("question in both splits: %q", v.Question)
			}
			questions[v.Question] = split
			if v.Dataset != dataset || v.Split != split || v.Category == "" || !strings.HasPrefix(v.ID, dataset+"-") {
				t.Errorf("%s: bad view fields %+v", v.ID, v)
			}
			if len(v.Resources) != 1 || v.Resources[0] != dataset {
				t.Errorf("%s: resources %v", v.ID, v.Resources)
			}
			if !strings.Contains(v.Instruction, "biomedical expert in handling EHR data") ||
				!strings.Contains(v.Instruction, "/data/"+dataset) {
				t.Errorf("%s: instruction lacks role line or data path", v.ID)
			}
			if tk.Truth.Extra["sql"] == "" || tk.Truth.Extra["template"] != v.Category || len(tk.Truth.Values) == 0 {
				t.Errorf("%s: truth lacks sql/template/values: %+v", v.ID, tk.Truth)
			}
			if strings.Contains(tk.Reference, tk.Truth.Answer) && len(tk.Truth.Answer) > 6 &&
				!strings.Contains(tk.Truth.Extra["sql"], tk.Truth.Answer) {
				t.Errorf("%s: reference embeds the answer %q", v.ID, tk.Truth.Answer)
			}
			cats[v.Category]++
			types[v.AnswerType]++
		}
	}
	t.Logf("%s: train %d, test %d, categories %d, answer types %v", dataset, len(splits["train"]), len(splits["test"]), len(cats), types)
}

// checkEHRReferences runs a fixed sample of references (3 per template; 30
// in -short mode) with Debian's Python and checks their output.
func checkEHRReferences(t *testing.T, dataset, dir string, all []tasks.Task) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s", python)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].View.ID < all[j].View.ID })
	byCat := map[string][]tasks.Task{}
	var cats []string
	for _, tk := range all {
		if byCat[tk.View.Category] == nil {
			cats = append(cats, tk.View.Category)
		}
		byCat[tk.View.Category] = append(byCat[tk.View.Category], tk)
	}
	sort.Strings(cats)
	var sample []tasks.Task
	for _, c := range cats {
		ts := byCat[c]
		for _, i := range []int{0, len(ts) / 2, len(ts) - 1} {
			sample = append(sample, ts[i])
		}
	}
	if testing.Short() {
		step := max(1, len(sample)/30)
		var s []tasks.Task
		for i := 0; i < len(sample); i += step {
			s = append(s, sample[i])
		}
		sample = s
	}
	runSQLReferences(t, dataset, dir, sample, compareEHRAnswer)
}

// runSQLReferences runs the references of sample against the generated
// database in dir, four at a time, and checks each printed answer.
func runSQLReferences(t *testing.T, label, dir string, sample []tasks.Task, compare func(tasks.Truth, string) error) {
	t.Helper()
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for _, tk := range sample {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out, err := runEHRReference(t.Context(), dir, tk.Reference)
			if err == nil {
				err = compare(tk.Truth, out)
			}
			if err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
				t.Errorf("%s (%s): %v\nquestion: %s\nsql: %s\noutput: %s", tk.View.ID, tk.View.Category, err,
					tk.View.Question, tk.Truth.Extra["sql"], out)
			}
		})
	}
	wg.Wait()
	t.Logf("%s: references %d/%d pass", label, len(sample)-failed, len(sample))
}

func runEHRReference(ctx context.Context, dataDir, code string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", code)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "MEDGYM_DATA_DIR="+dataDir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type ehrMismatch struct{ want, got string }

func (e ehrMismatch) Error() string { return "want " + e.want + ", got " + e.got }

// compareEHRAnswer is a minimal version of the strict verifier's rules for
// the answer types EHR SQL tasks use.
func compareEHRAnswer(tr tasks.Truth, out string) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	switch tr.Type {
	case schemas.AnswerBoolean, schemas.AnswerInteger:
		if last != tr.Answer {
			return ehrMismatch{tr.Answer, last}
		}
		return nil
	case schemas.AnswerNumber:
		if !ehrNumEqual(tr.Answer, last, tr.Tolerance) {
			return ehrMismatch{tr.Answer, last}
		}
		return nil
	}
	var got []any
	if err := json.Unmarshal([]byte(last), &got); err != nil {
		return ehrMismatch{tr.Answer, last}
	}
	gs := make([]string, len(got))
	for i, v := range got {
		switch x := v.(type) {
		case string:
			gs[i] = x
		case float64:
			gs[i] = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			gs[i] = strings.TrimSpace(strings.Trim(string(mustJSON(v)), `"`))
		}
	}
	want := append([]string(nil), tr.Values...)
	if len(gs) != len(want) {
		return ehrMismatch{tr.Answer, last}
	}
	used := make([]bool, len(gs))
	for _, w := range want {
		found := false
		for i, g := range gs {
			if !used[i] && (g == w || ehrNumEqual(w, g, tr.Tolerance)) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			return ehrMismatch{tr.Answer, last}
		}
	}
	return nil
}

func ehrNumEqual(want, got string, tol float64) bool {
	w, err1 := strconv.ParseFloat(want, 64)
	g, err2 := strconv.ParseFloat(got, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return math.Abs(g-w) <= tol*math.Abs(w)+1e-9
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestEHRSQLHelpers checks the pure helpers (also under -race).
func TestEHRSQLHelpers(t *testing.T) {
	for f, want := range map[float64]string{5: "5.0", 0.1: "0.1", 1e-05: "1e-05", 1.5e16: "1.5e+16", -2.25: "-2.25", 123456.789: "123456.789"} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
	got, ok := replaceBounded("was prescribed via po route and potassium po?", "po", "iv")
	if !ok || got != "was prescribed via iv route and potassium iv?" {
		t.Errorf("replaceBounded = %q, %v", got, ok)
	}
	if _, ok := replaceBounded("potassium", "po", "iv"); ok {
		t.Error("replaceBounded replaced inside a word")
	}
	q := ehrRewriteSQL("select count(*)>0 from x where strftime('%y',t) = '2105' and datetime(t) < = datetime(current_time,'-1 year') and v > sao2_lower and strftime('%j',t)")
	want := "select count(*)>0 from x where strftime('%Y',t) = '2105' and datetime(t) <= datetime('2105-12-31 23:59:00','-1 year') and v > 95.0 and strftime('%J',t)"
	if q != want {
		t.Errorf("ehrRewriteSQL:\n got %s\nwant %s", q, want)
	}
	if a, b := ehrSplit("what is the gender of patient 1?"), ehrSplit("what is the gender of patient 1?"); a != b {
		t.Error("ehrSplit is not stable")
	}
	tests := 0
	for i := range 1000 {
		if ehrSplit("question "+strconv.Itoa(i)) == "test" {
			tests++
		}
	}
	if tests < 150 || tests > 250 {
		t.Errorf("ehrSplit put %d of 1000 questions in test, want about 200", tests)
	}
	if y := drawTargetYear(rand.New(rand.NewPCG(1, 2))); y < 2100 || y > 2105 {
		t.Errorf("drawTargetYear = %d", y)
	}
	tr := tasks.Truth{Type: schemas.AnswerList, Values: []string{"a", "2.5"}, Tolerance: 1e-4}
	if err := compareEHRAnswer(tr, `["2.6", "a"]`); err == nil {
		t.Error("list compare accepted a value outside tolerance")
	}
	if err := compareEHRAnswer(tr, `[2.5, "a"]`); err != nil {
		t.Errorf("list compare: %v", err)
	}
}
