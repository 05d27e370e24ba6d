package generate

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks/meds"

	"github.com/medgym/medgym/tasks"
)

// TestEHRSQL2024 generates the dataset (twice unless -short: byte-identical
// output), checks the counts, that every answer that does not depend on
// the synthetic prices agrees with the authors' answer.json (which shows
// the rebuilt database is theirs: cohort, time shift, filters), that
// cost answers do not (the comparison can fail), the task fields, and
// runs a sample of the references.
func TestEHRSQL2024(t *testing.T) {
	root := dataRoot(t)
	for _, d := range []string{ehrsql24DataDir, ehrsql24DemoDir} {
		if _, err := os.Stat(filepath.Join(root, d)); err != nil {
			t.Skipf("no %s under %s", d, root)
		}
	}
	if ehrRaceBuild {
		t.Skip("generation under the race detector takes many minutes (transpiled SQLite); run without -race")
	}
	t.Parallel()
	SetMEDSReader(meds.Read)
	dirs := []string{t.TempDir(), t.TempDir()}
	start := time.Now()
	stats, err := GenerateEHRSQL2024(t.Context(), root, dirs[0])
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	t.Logf("generated in %s: %+v", time.Since(start).Round(time.Millisecond), stats)
	if !testing.Short() {
		if _, err := GenerateEHRSQL2024(t.Context(), root, dirs[1]); err != nil {
			t.Fatalf("generate again: %v", err)
		}
		for _, f := range []string{"train.jsonl", "test.jsonl", "ehrsql2024.db", "LICENSE.md", "cost.csv"} {
			if a, b := fileSHA(t, filepath.Join(dirs[0], f)), fileSHA(t, filepath.Join(dirs[1], f)); a != b {
				t.Errorf("%s differs between two generations: %s vs %s", f, a, b)
			}
		}
	}
	want := map[string][2]int{"train": {5124, 450}, "test": {1163, 232}}
	for _, st := range stats {
		w := want[st.Split]
		if st.Questions != w[0] || st.Unanswerable != w[1] {
			t.Errorf("%s: %d questions, %d unanswerable; want %d, %d", st.Split, st.Questions, st.Unanswerable, w[0], w[1])
		}
		if left := st.Empty + st.NullValue + st.TooMany + st.SQLError; st.Kept+left != st.Questions {
			t.Errorf("%s: %d kept + %d left out != %d questions", st.Split, st.Kept, left, st.Questions)
		}
		if st.SQLError != 0 {
			t.Errorf("%s: %d gold queries fail on the rebuilt database", st.Split, st.SQLError)
		}
		if st.Compared < 700 || st.Agree != st.Compared {
			t.Errorf("%s: %d of %d shift-invariant answers agree with the authors'", st.Split, st.Agree, st.Compared)
		}
		// chartevents is rebuilt from the lossy MEDS copy: a row may land
		// on a neighbouring stay (1 of 485 answers differs).
		if st.ChartCompared < 80 || st.ChartAgree*100 < st.ChartCompared*99 || st.Reconstructed < st.ChartCompared {
			t.Errorf("%s: %d of %d chartevents answers agree with the authors' (%d reconstructed tasks)", st.Split, st.ChartAgree, st.ChartCompared, st.Reconstructed)
		}
		if st.CostCompared == 0 || st.CostAgree == st.CostCompared {
			t.Errorf("%s: cost answers %d of %d agree: the comparison cannot tell random prices apart", st.Split, st.CostAgree, st.CostCompared)
		}
	}
	for _, f := range []string{"LICENSE.md", "patients.csv", "cost.csv", "chartevents.csv"} {
		if _, err := os.Stat(filepath.Join(dirs[0], f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	lic, _ := os.ReadFile(filepath.Join(dirs[0], "LICENSE.md"))
	if !strings.Contains(string(lic), "ODbL") || !strings.Contains(string(lic), "CC-BY-4.0") {
		t.Errorf("LICENSE.md lacks the ODbL or CC-BY notice")
	}

	// loadLibrary reads <LibraryDir>/verifier/<dataset>; link the temp dir there.
	lib := t.TempDir()
	if err := os.Mkdir(tasks.VerifierTree(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dirs[0], filepath.Join(tasks.VerifierTree(lib), tasks.EHRSQL2024Dataset)); err != nil {
		t.Fatal(err)
	}
	var all []tasks.Task
	for _, split := range []string{"train", "test"} {
		ts, err := tasks.Load(t.Context(), tasks.Source{Dataset: tasks.EHRSQL2024Dataset, Split: split, LibraryDir: lib})
		if err != nil {
			t.Fatalf("load %s: %v", split, err)
		}
		unans := 0
		for _, tk := range ts {
			v, tr := tk.View, tk.Truth
			if v.Split != split || v.Category != ehrsql24Category || !strings.HasPrefix(v.ID, "ehrsql2024-") || !tr.Abstention {
				t.Fatalf("%s: bad fields %+v %+v", v.ID, v, tr)
			}
			if !strings.Contains(v.Instruction, `"null"`) || !strings.Contains(v.Instruction, "/data/ehrsql2024") {
				t.Fatalf("%s: the instruction does not state the abstention answer or the data path", v.ID)
			}
			if tr.Unanswerable {
				unans++
				if tr.Answer != schemas.AbstainAnswer || tk.Reference != ehrsql24AbstainReference {
					t.Fatalf("%s: unanswerable task with truth %+v", v.ID, tr)
				}
			} else if tr.Extra["sql"] == "" || len(tr.Values) == 0 || tr.Answer == schemas.AbstainAnswer {
				t.Fatalf("%s: answerable task with truth %+v", v.ID, tr)
			}
			if reads := strings.Contains(tr.Extra["sql"], "chartevents"); reads != (tr.Extra["reconstructed"] != "") {
				t.Fatalf("%s: reads chartevents %v, marked reconstructed %q", v.ID, reads, tr.Extra["reconstructed"])
			}
		}
		if unans != want[split][1] {
			t.Errorf("%s: %d unanswerable tasks, want %d", split, unans, want[split][1])
		}
		all = append(all, ts...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].View.ID < all[j].View.ID })
	step := 40
	if testing.Short() {
		step = 200
	}
	var sample []tasks.Task
	for i := 0; i < len(all); i += step {
		sample = append(sample, all[i])
	}
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s", python)
	}
	runSQLReferences(t, tasks.EHRSQL2024Dataset, dirs[0], sample, func(tr tasks.Truth, out string) error {
		if tr.Unanswerable {
			if got := strings.TrimSpace(out); got != schemas.AbstainAnswer {
				return ehrMismatch{schemas.AbstainAnswer, got}
			}
			return nil
		}
		return compareEHRAnswer(tr, out)
	})
}

func TestEHRSQL2024Helpers(t *testing.T) {
	t.Parallel()
	got := ehrsql24PostProcess("SELECT  COUNT(*) FROM t WHERE x > = 1 AND\n strftime('%y',current_time) = '2100' AND v BETWEEN heart_rate_lower AND heart_rate_upper")
	want := "SELECT COUNT(*) FROM t WHERE x >= 1 AND strftime('%Y','2100-12-31 23:59:00') = '2100' AND v BETWEEN 60.0 AND 100.0"
	if got != want {
		t.Errorf("post-process:\n got %s\nwant %s", got, want)
	}
	if a, b := ehrsql24Normalise([][]any{{"po"}, {3.14159}, {int64(2)}}), ehrsql24NormaliseAuthors("[['3.142'], ['po'], ['2']]"); a != b {
		t.Errorf("normalised %q vs authors' %q", a, b)
	}
	if a, b := ehrsql24Normalise([][]any{{3.1}}), ehrsql24NormaliseAuthors("[['3.142']]"); a == b {
		t.Errorf("3.1 and 3.142 normalise alike")
	}
	if !keepLabel("heparin", "prescriptions") || keepLabel("heparin", "inputevents") || !keepLabel("aspirin", "inputevents") {
		t.Errorf("label map")
	}
	b := &ehr24Build{offset: map[string]time.Duration{"1": 5 * 365 * 24 * time.Hour}}
	if got := b.shift("1", "2095-03-01 10:00:00"); got != "2100-02-28 10:00:00" { // 365-day years over one leap day
		t.Errorf("shift: %v", got)
	}
	if got := b.shift("1", "2096-12-31"); got != nil {
		t.Errorf("a time after now must become NULL, got %v", got)
	}
	if got := b.shift("2", "2095-03-01 10:00:00"); got != nil {
		t.Errorf("a patient without an offset must give NULL, got %v", got)
	}
}

func TestSummarizeCountsUnanswerable(t *testing.T) {
	t.Parallel()
	mk := func(un bool) tasks.Task {
		return tasks.Task{View: schemas.TaskView{Dataset: "ehrsql2024", Split: "test", Category: "c", AnswerType: schemas.AnswerList},
			Truth: tasks.Truth{Abstention: true, Unanswerable: un}}
	}
	s := tasks.Summarize([]tasks.Task{mk(true), mk(false), mk(true)})
	if len(s.Groups) != 1 || s.Groups[0].Count != 3 || s.Groups[0].Unanswerable != 2 {
		t.Fatalf("summary %+v, want 3 tasks of which 2 unanswerable", s.Groups)
	}
}
