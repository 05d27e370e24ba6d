package tasks

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
)

const upstreamFixtures = "testdata/upstream"

// TestLoadUpstreamAll loads both splits of every dataset's fixture and
// checks ids, views, and that no task has a reference.
func TestLoadUpstreamAll(t *testing.T) {
	want := map[string][2]int{ // train, test
		"mimic_iii": {3, 1}, "eicu": {1, 1}, "treqs": {2, 1}, "medcalcbench": {1, 4}, "medagentbench": {2, 1},
		"biocoder": {1, 1}, "biodsbench": {1, 1}, "ehrshot": {2, 2}, "ehr_seqsql": {1, 1}, "ehrcon": {2, 2},
		"npowerai": {2, 2}, "mimic_extract": {1, 1},
	}
	if got := UpstreamDatasets(); len(got) != 12 || len(want) != 12 {
		t.Fatalf("upstream datasets %v", got)
	}
	for _, ds := range UpstreamDatasets() {
		for i, split := range []string{"train", "test"} {
			ts, err := Load(t.Context(), Source{Dataset: ds, Split: split, TasksDir: upstreamFixtures})
			if err != nil {
				t.Errorf("%s/%s: %v", ds, split, err)
				continue
			}
			if len(ts) != want[ds][i] {
				t.Errorf("%s/%s: %d tasks, want %d", ds, split, len(ts), want[ds][i])
			}
			for j, tk := range ts {
				v := tk.View
				if !MatchID(v.ID, ds+"-"+strconv.Itoa(j)) || v.Dataset != ds || v.Split != split || v.Category == "" ||
					v.Instruction == "" || v.Question == "" || len(v.PermittedActions) == 0 || v.AnswerType != tk.Truth.Type {
					t.Errorf("%s/%s: bad view %+v", ds, split, v)
				}
				if tk.Reference != "" {
					t.Errorf("%s: has a reference", v.ID)
				}
				for _, r := range v.Resources {
					if strings.Contains(r, "/") {
						t.Errorf("%s: resource %q", v.ID, r)
					}
				}
			}
		}
	}
}

// TestLoadUpstreamFields checks the dataset-specific mappings.
func TestLoadUpstreamFields(t *testing.T) {
	load := func(ds, split string) []Task {
		t.Helper()
		ts, err := LoadUpstream(t.Context(), Source{Dataset: ds, Split: split, TasksDir: upstreamFixtures})
		if err != nil {
			t.Fatalf("%s/%s: %v", ds, split, err)
		}
		return ts
	}
	m := load("mimic_iii", "train") // a blank line does not count
	if m[2].View.ID != "mimic_iii-2-synthetic_0003" || m[2].Truth.Type != schemas.AnswerList || len(m[2].Truth.Values) != 2 {
		t.Errorf("mimic_iii list task: %+v", m[2])
	}
	if m[0].View.Question != "what is the gender of patient 101?" || m[0].Truth.Type != schemas.AnswerString ||
		m[0].Truth.Answer != "f" || m[0].View.Resources[0] != "mimic_iii" || m[0].Truth.Extra["sql"] == "" {
		t.Errorf("mimic_iii task: %+v", m[0])
	}
	if m[1].Truth.Type != schemas.AnswerInteger || m[1].Truth.Values[0] != "3" {
		t.Errorf("mimic_iii count: %+v", m[1].Truth)
	}
	v := load("mimic_iii", "test")[0] // valid_tasks.jsonl
	if v.Truth.Type != schemas.AnswerBoolean || v.Truth.Answer != "true" || v.Truth.Values[0] != "True" {
		t.Errorf("mimic_iii valid: %+v", v.Truth)
	}
	tr := load("treqs", "train")
	if tr[1].Truth.Type != schemas.AnswerList || tr[1].Truth.Values[0] != "F" || tr[0].View.Category != "count" ||
		tr[1].View.Category != "select" || !strings.Contains(tr[0].View.Instruction, "/data/treqs") {
		t.Errorf("treqs: %+v / %+v", tr[0], tr[1].Truth)
	}
	mc := load("medcalcbench", "test")
	// Upstream's own identity: the line index (upstream's idx) and the Row
	// Number, in the id and in Extra.
	if mc[3].View.ID != "medcalcbench-3-row1032" || mc[3].Truth.Extra["upstream_id"] != "Row Number 1032" ||
		mc[3].Truth.Extra["upstream_line"] != "4" || mc[3].Truth.Extra["upstream_index"] != "3" ||
		mc[3].Truth.Extra["upstream_file"] != "medcalcbench/test_tasks.jsonl" {
		t.Errorf("medcalcbench identity: %s %v", mc[3].View.ID, mc[3].Truth.Extra)
	}
	// An integer calculator (GCS, id 21) with numeric [11, 11] limits is
	// checked as the built-in tasks are: round(answer) == 11.
	if mc[3].Truth.Type != schemas.AnswerInteger || mc[3].Truth.Answer != "11" || mc[3].Truth.Lower != nil ||
		mc[3].View.AnswerType != schemas.AnswerInteger {
		t.Errorf("medcalcbench integer calculator: %+v", mc[3].Truth)
	}
	if mc[0].Truth.Type != schemas.AnswerNumber || *mc[0].Truth.Lower != 73.889 || mc[0].View.Context == "" ||
		mc[1].Truth.Type != schemas.AnswerDate || mc[2].Truth.Type != schemas.AnswerTuple {
		t.Errorf("medcalcbench: %+v %+v %+v", mc[0].Truth, mc[1].Truth, mc[2].Truth)
	}
	if mt := load("medcalcbench", "train")[0]; mt.Truth.Answer != "3" || *mt.Truth.Upper != 3 {
		t.Errorf("medcalcbench numeric fields: %+v", mt.Truth)
	}
	ma := load("medagentbench", "train")
	if ma[0].View.Category != "task1" || ma[0].Truth.Values[0] != "S0000001" || ma[1].Truth.Values != nil ||
		!strings.Contains(ma[1].View.Question, "2023-11-13") || !strings.Contains(ma[0].View.Instruction, "Synthetic endpoint") {
		t.Errorf("medagentbench: %+v %+v", ma[0], ma[1].Truth)
	}
	if bc := load("biocoder", "test")[0]; !strings.Contains(bc.View.Instruction, "def revcomp(s)") ||
		!strings.Contains(bc.Truth.Extra["context"], "<<insert solution here>>") {
		t.Errorf("biocoder: %+v", bc)
	}
	if bd := load("biodsbench", "test")[0]; !strings.Contains(bd.View.Question, "Count the synthetic") ||
		!strings.Contains(bd.View.Question, "3. Count.") || bd.Truth.Extra["test_cases"] == "" || bd.View.Category != "synthetic_study_1" {
		t.Errorf("biodsbench: %+v", bd)
	}
	if es := load("ehrshot", "test"); es[1].View.Category != "lab_anemia" || es[1].Truth.Extra["task_name"] != "lab_anemia" {
		t.Errorf("ehrshot: %+v", es[1])
	}
	if sq := load("ehr_seqsql", "test")[0]; sq.View.Question != "what is the gender of patient 101? and when was their first admission?" ||
		sq.View.Resources[0] != "mimic_iii" {
		t.Errorf("ehr_seqsql: %+v", sq.View)
	}
	if sq := load("ehr_seqsql", "train")[0]; sq.Truth.Answer != "100" || sq.Truth.Type != schemas.AnswerInteger {
		t.Errorf("ehr_seqsql scalar ans: %+v", sq.Truth)
	}
	ec := load("ehrcon", "test")
	if ec[0].Truth.Answer != "true" || ec[1].Truth.Answer != "false" || !strings.Contains(ec[1].View.Question, "admission id 100002 ") ||
		!strings.Contains(ec[0].View.Question, "synthetic heparin") || strings.Contains(ec[0].View.Question, "true") {
		t.Errorf("ehrcon: %+v %+v", ec[0], ec[1])
	}
	np := load("npowerai", "test")
	if np[0].Truth.Type != schemas.AnswerInteger || np[0].Truth.Answer != "64" || np[0].Truth.Extra["estimate_target"] != "size" ||
		np[1].Truth.Type != schemas.AnswerNumber || np[1].Truth.Extra["estimate_target"] != "power" || np[1].View.Category != "chi-square test_power" {
		t.Errorf("npowerai: %+v %+v", np[0], np[1])
	}
	if me := load("mimic_extract", "train")[0]; me.View.Category != "mort_icu" || me.Truth.Extra["performance"] != "ACC=0.9,AUC=0.8,AUPRC=0.4,F1=0.3" {
		t.Errorf("mimic_extract: %+v", me)
	}
}

// TestLoadUpstreamErrors checks that malformed lines report file:line and
// the field at fault.
func TestLoadUpstreamErrors(t *testing.T) {
	bad := filepath.Join(upstreamFixtures, "bad")
	cases := []struct {
		ds, split, file string
		line            int
		field           string
		kind            error
		msg             string
	}{
		{"treqs", "train", "treqs/train_tasks.jsonl", 2, "answer", ErrFieldType, "want a list"},
		{"treqs", "test", "treqs/test_tasks.jsonl", 3, "question", ErrMissingField, "missing required field"},
		{"npowerai", "test", "npowerai/test_tasks.jsonl", 1, "answer", ErrFieldType, "want a number"},
		{"npowerai", "train", "npowerai/train_tasks.jsonl", 1, "estimate_target", nil, "neither"},
		{"ehrcon", "test", "ehrcon/test_tasks.jsonl", 1, "Has error", ErrFieldType, "want a boolean"},
		{"medcalcbench", "test", "medcalcbench/test_tasks.jsonl", 1, "Lower Limit", nil, "ordered pair"},
		{"mimic_iii", "test", "mimic_iii/valid_tasks.jsonl", 1, "answer[1]", ErrFieldType, "string, number or boolean"},
		{"mimic_iii", "train", "mimic_iii/train_tasks.jsonl", 1, "", nil, "not a JSON object"},
	}
	for _, c := range cases {
		_, err := LoadUpstream(t.Context(), Source{Dataset: c.ds, Split: c.split, TasksDir: bad})
		var ue *UpstreamError
		if !errors.As(err, &ue) {
			t.Errorf("%s/%s: error %v is not an *UpstreamError", c.ds, c.split, err)
			continue
		}
		prefix := filepath.Join(bad, c.file) + ":" + strconv.Itoa(c.line) + ": "
		if ue.Field != c.field || ue.Line != c.line || !strings.HasPrefix(err.Error(), prefix) ||
			!strings.Contains(err.Error(), c.msg) || (c.kind != nil && !errors.Is(err, c.kind)) {
			t.Errorf("%s/%s: got %q (field %q), want prefix %q, field %q, %q", c.ds, c.split, err, ue.Field, prefix, c.field, c.msg)
		}
		if c.field != "" && !strings.Contains(err.Error(), `field "`+c.field+`"`) {
			t.Errorf("%s/%s: message %q does not name the field", c.ds, c.split, err)
		}
	}
	if _, err := LoadUpstream(t.Context(), Source{Dataset: "nope", Split: "test", TasksDir: bad}); !errors.Is(err, ErrUnknownDataset) {
		t.Errorf("unknown dataset: %v", err)
	}
	if _, err := LoadUpstream(t.Context(), Source{Dataset: "eicu", Split: "test", TasksDir: bad}); err == nil ||
		!strings.Contains(err.Error(), "valid_tasks.jsonl") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LoadUpstream(t.Context(), Source{Dataset: "eicu", Split: "dev", TasksDir: bad}); err == nil {
		t.Error("unknown split accepted")
	}
}

// TestUpstreamIdentity checks the id suffix of every dataset that has an
// identity field, and MatchID.
func TestUpstreamIdentity(t *testing.T) {
	want := map[string]string{
		"eicu/test": "eicu-0-synthetic_e2", "treqs/test": "treqs-0-2", "medagentbench/test": "medagentbench-0-task5_3",
		"biocoder/test": "biocoder-0-0000000000000000", "biodsbench/test": "biodsbench-0-q0", "ehrshot/test": "ehrshot-0-0",
		"ehrcon/test": "ehrcon-0", "ehr_seqsql/test": "ehr_seqsql-0", "npowerai/test": "npowerai-0-synthetic_1",
		"mimic_extract/test": "mimic_extract-0-mort_icu", "medcalcbench/test": "medcalcbench-0-row1",
	}
	for k, id := range want {
		ds, split, _ := strings.Cut(k, "/")
		ts, err := LoadUpstream(t.Context(), Source{Dataset: ds, Split: split, TasksDir: upstreamFixtures})
		if err != nil {
			t.Fatal(err)
		}
		if ts[0].View.ID != id {
			t.Errorf("%s: first id %q, want %q", k, ts[0].View.ID, id)
		}
	}
	for _, c := range []struct {
		id, want string
		ok       bool
	}{
		{"medcalcbench-4-row1032", "medcalcbench-4", true},
		{"medcalcbench-4-row1032", "medcalcbench-4-row1032", true},
		{"medcalcbench-40-row7", "medcalcbench-4", false},
		{"medcalcbench-4-row1032", "medcalcbench-4-row", false},
		{"medcalcbench-4", "medcalcbench-4", true},
		{"mimic_iii-2-synthetic_0003", "mimic_iii", false},
		{"a-b-c", "a-b", false},
	} {
		if got := MatchID(c.id, c.want); got != c.ok {
			t.Errorf("MatchID(%q, %q) = %v, want %v", c.id, c.want, got, c.ok)
		}
	}
}

// TestUpstreamDiscovery checks which dataset folders and split files
// UpstreamPresent and UpstreamSplits find.
func TestUpstreamDiscovery(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"medcalcbench/test_tasks.jsonl", "treqs/train_tasks.jsonl", "notupstream/x.jsonl"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := UpstreamPresent(dir)
	if err != nil || strings.Join(got, ",") != "medcalcbench,treqs" {
		t.Errorf("UpstreamPresent = %v, %v", got, err)
	}
	present, missing, err := UpstreamSplits(dir, "medcalcbench", []string{"train", "test"})
	if err != nil || strings.Join(present, ",") != "test" || strings.Join(missing, ",") != "train" {
		t.Errorf("UpstreamSplits medcalcbench = %v %v %v", present, missing, err)
	}
	if _, _, err := UpstreamSplits(dir, "medcalcbench", []string{"dev"}); err == nil {
		t.Error("unknown split accepted")
	}
}

// TestBioCoderOutputs checks how the loader attaches reference outputs: by
// file and line, a stale idx an error, a failed run marked as such.
func TestBioCoderOutputs(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "upstream-biocoder", "biocoder", "test_tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "biocoder"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "biocoder", "test_tasks.jsonl"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(outputs string) ([]Task, error) {
		if err := os.WriteFile(filepath.Join(dir, BioCoderOutputsFile), []byte(outputs), 0o644); err != nil {
			t.Fatal(err)
		}
		return LoadUpstream(t.Context(), Source{Dataset: "biocoder", Split: "test", TasksDir: dir})
	}
	ts, err := load("")
	if err != nil {
		t.Fatal(err)
	}
	idx0, idx1 := ts[0].Truth.Extra["idx"], ts[1].Truth.Extra["idx"]
	if ts[0].Truth.Type != schemas.AnswerOutput || ts[0].Truth.Extra["reference_output"] != "missing" ||
		!strings.Contains(ts[0].View.Harness, schemas.HarnessMarker) || slices.Contains(ts[0].View.PermittedActions, "answer") {
		t.Fatalf("no outputs: %+v / %+v", ts[0].View, ts[0].Truth)
	}
	ts, err = load(`{"file":"biocoder/test_tasks.jsonl","line":1,"idx":"` + idx0 + `","status":"ok","exit_code":0,"stdout":"x 0.5\n","message":"x 0.5\n"}` + "\n" +
		`{"file":"biocoder/test_tasks.jsonl","line":2,"idx":"` + idx1 + `","status":"error","exit_code":1,"stdout":"","message":"Traceback"}` + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].Truth.Answer != "x 0.5\n" || ts[0].Truth.Extra["reference_output"] != "ok" ||
		ts[1].Truth.Extra["reference_output"] != "failed" || ts[1].Truth.Extra["reference_message"] != "Traceback" ||
		ts[2].Truth.Extra["reference_output"] != "missing" {
		t.Fatalf("outputs: %+v / %+v / %+v", ts[0].Truth, ts[1].Truth, ts[2].Truth)
	}
	if _, err := load(`{"file":"biocoder/test_tasks.jsonl","line":1,"idx":"` + idx1 + `","status":"ok","stdout":"x"}` + "\n"); err == nil ||
		!strings.Contains(err.Error(), "task file changed") || !strings.Contains(err.Error(), "test_tasks.jsonl:1") {
		t.Fatalf("stale outputs: %v", err)
	}
	if _, err := load("not json\n"); err == nil || !strings.Contains(err.Error(), BioCoderOutputsFile+":1") {
		t.Fatalf("bad outputs file: %v", err)
	}
}
