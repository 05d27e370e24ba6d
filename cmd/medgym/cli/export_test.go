package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/cmd/medgym/internal/export"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// TestExportCanary: `medgym export` over a library whose answer key holds a
// canary writes verl's RL parquet and the prompt-only dataset with the
// prompt the llm-worker builds and a task reference for ground truth, and no
// exported byte holds the canary (the Parquet files are uncompressed, so a
// byte search sees every value). Positive controls: the same search finds the
// canary in the library's verifier tree, and finds the task's question in the
// exports.
func TestExportCanary(t *testing.T) {
	const canary = "MEDGYM-CANARY-1507"
	lib := answerKeyLibrary(t, canary)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"export", "--library", lib, "--dataset", "eicu", "--split", "test", "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	ts, err := tasks.Load(context.Background(), tasks.Source{Dataset: "eicu", Split: "test", LibraryDir: lib})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Truth.Answer != canary {
		t.Fatalf("library: %d tasks, truth %v: want 2 with the canary", len(ts), ts[0].Truth.Answer)
	}

	files := map[string][]byte{}
	for _, rel := range []string{"verl/eicu_test.parquet", "prompts/eicu_test.parquet", "prompts/eicu_test.jsonl"} {
		b, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			t.Fatal(err)
		}
		files[rel] = b
	}
	filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if _, ok := files[must(filepath.Rel(out, p))]; !ok {
				t.Errorf("unexpected export file %s", p)
			}
		}
		return nil
	})
	for rel, b := range files {
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s holds the answer key's canary", rel)
		}
		if !bytes.Contains(b, []byte(ts[0].View.Question)) {
			t.Errorf("%s lacks the task's question (the byte search would miss a canary too)", rel)
		}
	}
	answerKey, err := os.ReadFile(filepath.Join(tasks.VerifierTree(lib), "eicu", "test.jsonl"))
	if err != nil || !bytes.Contains(answerKey, []byte(canary)) {
		t.Fatalf("positive control: the canary is not in the verifier tree (%v)", err)
	}

	// The rows: verl's columns, read back through Arrow.
	want := agent.BuildMessages(ts[0].View, agent.EpisodePromptOptions(schemas.DefaultOptions(), false))
	var verl []export.VerlRecord
	readParquet(t, filepath.Join(out, "verl", "eicu_test.parquet"), &verl)
	if len(verl) != 2 {
		t.Fatalf("verl rows: %d, want 2", len(verl))
	}
	r := verl[0]
	if r.DataSource != "medgym/eicu" || r.RewardModel != (export.RewardModel{Style: "rule", GroundTruth: "medgym://eicu/test/eicu-canary-0"}) ||
		r.ExtraInfo.InteractionKwargs != (export.InteractionKwargs{Name: "medgym", TaskID: "eicu-canary-0", Dataset: "eicu", Split: "test"}) ||
		r.ExtraInfo.TaskID != "eicu-canary-0" || r.ExtraInfo.Split != "test" {
		t.Errorf("verl row: %+v", r)
	}
	if !equalMessages(r.Prompt, want) {
		t.Errorf("verl prompt differs from the llm-worker's:\n got %v\nwant %v", r.Prompt, want)
	}
	var prompts []export.PromptRecord
	readParquet(t, filepath.Join(out, "prompts", "eicu_test.parquet"), &prompts)
	if len(prompts) != 2 || prompts[1].TaskID != "eicu-canary-1" || prompts[1].EnvClass != "medgym" || !equalMessages(prompts[0].Prompt, want) {
		t.Errorf("prompt rows: %+v", prompts)
	}
}

// TestExportPromptMode: --prompt-mode tools exports the tools prompt a
// session under prompt_mode tools opens with (no JSON reply format).
func TestExportPromptMode(t *testing.T) {
	lib := answerKeyLibrary(t, "MEDGYM-CANARY-2")
	out := t.TempDir()
	if err := Run(context.Background(), []string{"export", "--library", lib, "--dataset", "eicu", "--split", "test", "--prompt-mode", "tools", "--out", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	ts, err := tasks.Load(context.Background(), tasks.Source{Dataset: "eicu", Split: "test", LibraryDir: lib})
	if err != nil {
		t.Fatal(err)
	}
	opts := schemas.DefaultOptions()
	opts.PromptMode = schemas.PromptModeTools
	want := agent.BuildMessages(ts[0].View, agent.EpisodePromptOptions(opts, false))
	var prompts []export.PromptRecord
	readParquet(t, filepath.Join(out, "prompts", "eicu_test.parquet"), &prompts)
	if len(prompts) != 2 || !equalMessages(prompts[0].Prompt, want) || strings.Contains(want[0].Content, "JSON") {
		t.Errorf("prompt rows: %+v\nwant %v", prompts, want)
	}
}

// TestExportBadInput: a missing --out, an unknown dataset and bad options are
// refused with a reason.
func TestExportBadInput(t *testing.T) {
	lib := answerKeyLibrary(t, "MEDGYM-CANARY-1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--library", lib, "--dataset", "eicu"}, "--out is required"},
		{[]string{"--library", lib, "--dataset", "nosuch", "--out", t.TempDir()}, "unknown dataset"},
		{[]string{"--library", lib, "--dataset", "eicu", "--end-on", "never", "--out", t.TempDir()}, "end_on"},
		{[]string{"--library", lib, "--dataset", "eicu", "--prompt-mode", "xml", "--out", t.TempDir()}, "prompt_mode"},
		{[]string{"--library", lib, "--dataset", "eicu", "--prompt-mode", "tools", "--upstream-compat", "--out", t.TempDir()}, "prompt_mode"},
	} {
		err := Run(context.Background(), append([]string{"export"}, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("export %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// answerKeyLibrary writes a two-tree task library of two eicu test tasks
// whose answer key (truth and reference solution, in the verifier tree)
// holds canary.
func answerKeyLibrary(t *testing.T, canary string) string {
	t.Helper()
	lib := t.TempDir()
	var ts []tasks.Task
	for i := range 2 {
		ts = append(ts, tasks.Task{
			View: schemas.TaskView{ID: fmt.Sprintf("eicu-canary-%d", i), Dataset: "eicu", Category: "canary", Split: "test",
				Instruction: "The tables are CSV files under /data/eicu.", Question: "What is the secret code of this task?",
				AnswerType: schemas.AnswerString, Resources: []string{"eicu"},
				PermittedActions: []string{schemas.ActionValidateCode, schemas.ActionTerminal}},
			Truth:     tasks.Truth{Type: schemas.AnswerString, Answer: canary},
			Reference: fmt.Sprintf("print(%q)", canary),
		})
	}
	for _, d := range []string{tasks.AgentTree(lib), tasks.VerifierTree(lib)} {
		if err := os.MkdirAll(filepath.Join(d, "eicu"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := tasks.WriteTasks(filepath.Join(tasks.VerifierTree(lib), "eicu", "test.jsonl"), ts); err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.WriteManifests(lib); err != nil {
		t.Fatal(err)
	}
	return lib
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func equalMessages(a, b []schemas.ChatMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// readParquet decodes a Parquet file's rows into v (a pointer to a slice of
// records whose JSON keys are the columns).
func readParquet(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := rd.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	var rows []json.RawMessage
	tr := array.NewTableReader(tbl, -1)
	defer tr.Release()
	for tr.Next() {
		b, err := tr.RecordBatch().MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var batch []json.RawMessage
		if err := json.Unmarshal(b, &batch); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, batch...)
	}
	b, _ := json.Marshal(rows)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
