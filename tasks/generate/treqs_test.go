package generate

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

// TestTREQSFormatSQL checks the logical-form reader and SQL writer against
// every MIMICSQL template row: the form must regenerate the row's SQL byte
// for byte (pure Go; also under -race).
func TestTREQSFormatSQL(t *testing.T) {
	root := dataRoot(t)
	rows, err := readTREQSRows(filepath.Join(root, "mimicsql"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2000 {
		t.Errorf("%d template rows, want 2000", len(rows))
	}
	natural := 0
	for i := range rows {
		r := &rows[i]
		if got := treqsSQL(r.Format, r.conds, `"`); got != r.SQL {
			t.Errorf("key %s:\n got %s\nwant %s", r.Key, got, r.SQL)
		}
		if len(r.natural) != 2 {
			t.Errorf("key %s: %d natural wordings", r.Key, len(r.natural))
		}
		if _, ok := treqsRephrase(r.Question, r.conds, r.conds); !ok {
			t.Errorf("key %s: template question does not spell its values: %s", r.Key, r.Question)
		}
		for _, n := range r.natural {
			if _, ok := treqsRephrase(n, r.conds, r.conds); ok {
				natural++
			}
		}
	}
	t.Logf("natural wordings that spell their values: %d of %d", natural, 2*len(rows))
}

// TestTREQSHelpers checks rephrasing and answer shapes (also under -race).
func TestTREQSHelpers(t *testing.T) {
	old := []treqsCond{{qText: "0"}, {qText: "mal neo descend colon"}}
	repl := []treqsCond{{qText: "1"}, {qText: "hypertension nos"}}
	got, ok := treqsRephrase("how many patients whose death status is 0 and diagnoses short title is mal neo descend colon?", old, repl)
	if want := "how many patients whose death status is 1 and diagnoses short title is hypertension nos?"; !ok || got != want {
		t.Errorf("rephrase = %q, %v", got, ok)
	}
	if _, ok := treqsRephrase("death status 0 and age 0", old[:1], repl[:1]); ok {
		t.Error("rephrase accepted a value that occurs twice")
	}
	if _, ok := treqsRephrase("year 2130.05", []treqsCond{{qText: "0"}}, repl[:1]); ok {
		t.Error("rephrase matched inside a number")
	}
	if q := treqsQuestionValue("2131.0", true); q != "2131" {
		t.Errorf("question value %q", q)
	}
	a, ok := treqsAnswer(1, ehrResult{cols: 1, rows: [][]any{{int64(0)}}})
	if ok {
		t.Errorf("zero count kept: %+v", a)
	}
	a, ok = treqsAnswer(0, ehrResult{cols: 2, rows: [][]any{{"F", int64(0)}}})
	if !ok || a.typ != schemas.AnswerList || !a.ordered || a.answer != `["F", 0]` {
		t.Errorf("row answer %+v %v", a, ok)
	}
	a, ok = treqsAnswer(0, ehrResult{cols: 1, rows: [][]any{{"a"}, {"b"}}})
	if !ok || a.shape != "distinct" || a.ordered || len(a.values) != 2 {
		t.Errorf("distinct answer %+v %v", a, ok)
	}
	if _, ok = treqsAnswer(0, ehrResult{cols: 2, rows: [][]any{{"F", int64(0)}, {"M", int64(1)}}}); ok {
		t.Error("several multi-column rows kept")
	}
	a, ok = treqsAnswer(4, ehrResult{cols: 1, rows: [][]any{{65.5}}})
	if !ok || a.typ != schemas.AnswerNumber || a.answer != "65.5" {
		t.Errorf("avg answer %+v %v", a, ok)
	}
	if s := treqsSplit("SELECT 1"); s != treqsSplit("SELECT 1") {
		t.Error("split not stable")
	}
	if !strings.Contains(treqsInstruction(), "All the tables are saved in the data directory /data/treqs") {
		t.Error("instruction lacks the data path")
	}
}

// TestTREQS generates the task set twice and checks determinism, counts,
// splits, the database and a sample of references.
func TestTREQS(t *testing.T) {
	root := dataRoot(t)
	if _, err := os.Stat(filepath.Join(root, "mimicsql")); err != nil {
		t.Skipf("no mimicsql under %s", root)
	}
	if ehrRaceBuild {
		t.Skip("generation under the race detector takes many minutes (transpiled SQLite); run without -race")
	}
	t.Parallel()
	start := time.Now()
	dir, train, test := generateInto(t, tasks.TREQSDataset)
	t.Logf("generated in %s", time.Since(start).Round(time.Millisecond))
	checkSplits(t, tasks.TREQSDataset, train, test)
	if n := len(train) + len(test); n < 1500 {
		t.Errorf("only %d instances", n)
	}
	sqls := map[string]string{}
	wordings := map[string]int{}
	for _, tk := range append(append([]tasks.Task(nil), train...), test...) {
		q := tk.Truth.Extra["sql"]
		if s, ok := sqls[q]; ok && s != tk.View.Split {
			t.Errorf("sql in both splits: %s", q)
		}
		sqls[q] = tk.View.Split
		wordings[tk.Truth.Extra["wording"]]++
		if len(tk.Truth.Values) == 0 || tk.Truth.Values[0] == "" {
			t.Errorf("%s: no gold values", tk.View.ID)
		}
		if len(tk.View.Resources) != 1 || tk.View.Resources[0] != tasks.TREQSDataset {
			t.Errorf("%s: resources %v", tk.View.ID, tk.View.Resources)
		}
	}
	t.Logf("wordings: %v", wordings)
	for _, f := range []string{"treqs.db", "LICENSE.md", "DEMOGRAPHIC.csv", "DIAGNOSES.csv", "PROCEDURES.csv", "PRESCRIPTIONS.csv", "LAB.csv"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	checkTREQSCounts(t, filepath.Join(dir, "treqs.db"))
	if !testing.Short() {
		b, _, _ := generateInto(t, tasks.TREQSDataset)
		for _, f := range []string{"train.jsonl", "test.jsonl", "treqs.db", "LAB.csv", "LICENSE.md"} {
			if x, y := fileSHA(t, libFile(dir, f)), fileSHA(t, libFile(b, f)); x != y {
				t.Errorf("%s differs between two generations", f)
			}
		}
	}
	checkTREQSReferences(t, dir, append(train, test...))
}

// checkTREQSCounts compares the table sizes with the rebuild check in
// mimicsql/PROVENANCE.md.
func checkTREQSCounts(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := map[string]int{"DEMOGRAPHIC": 129, "DIAGNOSES": 1716, "PROCEDURES": 503, "PRESCRIPTIONS": 10398, "LAB": 53652}
	for tab, n := range want {
		var got int
		if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+tab).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Errorf("%s has %d rows, want %d", tab, got, n)
		}
	}
}

// checkTREQSReferences runs a spread sample of references (4 per
// category; 1 with -short; $MEDGYM_REF_SAMPLE per category when set) with
// Debian's Python and compares their output as the strict verifier would.
func checkTREQSReferences(t *testing.T, dir string, all []tasks.Task) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s", python)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].View.ID < all[j].View.ID })
	n := 4
	if testing.Short() {
		n = 1
	}
	if v, err := strconv.Atoi(os.Getenv("MEDGYM_REF_SAMPLE")); err == nil && v > 0 {
		n = v
	}
	sample := sampleSpread(all, n)
	runSQLReferences(t, "treqs", dir, sample, compareTREQSAnswer)
}

// compareTREQSAnswer adds string answers and ordered lists to
// compareEHRAnswer.
func compareTREQSAnswer(tr tasks.Truth, out string) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	switch {
	case tr.Type == schemas.AnswerString:
		if strings.Join(strings.Fields(strings.ToLower(last)), " ") != strings.Join(strings.Fields(strings.ToLower(tr.Answer)), " ") {
			return ehrMismatch{tr.Answer, last}
		}
		return nil
	case tr.Type == schemas.AnswerList && tr.Ordered:
		var got []any
		if err := json.Unmarshal([]byte(last), &got); err != nil || len(got) != len(tr.Values) {
			return ehrMismatch{tr.Answer, last}
		}
		for i, v := range got {
			g := fmt.Sprint(v)
			if f, ok := v.(float64); ok {
				g = strconv.FormatFloat(f, 'g', -1, 64)
			}
			if g != tr.Values[i] && !ehrNumEqual(tr.Values[i], g, tr.Tolerance) {
				return ehrMismatch{tr.Answer, last}
			}
		}
		return nil
	}
	return compareEHRAnswer(tr, out)
}
