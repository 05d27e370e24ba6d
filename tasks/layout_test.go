package tasks

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
)

// TestAgentTreeRefusesTaskFiles: manifests are not written over an agent
// tree that holds a task file.
func TestAgentTreeRefusesTaskFiles(t *testing.T) {
	lib := t.TempDir()
	for _, d := range []string{filepath.Join(AgentTree(lib), "x"), VerifierTree(lib)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := WriteManifests(lib); err != nil {
		t.Fatalf("clean trees: %v", err)
	}
	if err := os.WriteFile(filepath.Join(AgentTree(lib), "x", "test.jsonl"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteManifests(lib); err == nil || !strings.Contains(err.Error(), "verifier-only") {
		t.Fatalf("agent tree with a task file: %v", err)
	}
}

// TestOldLayoutIsRefused: a library from before the split (task files next
// to the data) is not loaded.
func TestOldLayoutIsRefused(t *testing.T) {
	lib := t.TempDir()
	if err := os.MkdirAll(filepath.Join(lib, "eicu"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "eicu", "test.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(t.Context(), Source{Dataset: "eicu", Split: "test", LibraryDir: lib})
	if !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), "old one-tree layout") {
		t.Fatalf("old layout: %v", err)
	}
}

// TestStageUpstream: the agent view of an upstream folder has every data
// file and no task file; its hashes equal UpstreamHashes of the folder.
func TestStageUpstream(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{
		"mimic_iii/valid_tasks.jsonl":       `{"question": "q", "answer": ["CANARY"]}`,
		"mimic_iii/train_tasks.jsonl":       `{"question": "q", "answer": ["CANARY"]}`,
		"mimic_iii/PATIENTS.csv":            "subject_id\n1\n",
		"mimic_iii/mimic_iii.db":            "sqlite",
		"medagentbench/funcs_v1.json":       "[]",
		"ehrshot/task.jsonl":                `{"label": "CANARY"}`,
		"ehrshot/features/train_labels.csv": "id,label\n1,0\n",
		BioCoderOutputsFile:                 `{"stdout": "CANARY"}`,
	}
	for p, c := range files {
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "view")
	h, err := StageUpstream(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		b, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(p)))
		switch {
		case strings.Contains(c, "CANARY") && err == nil:
			t.Errorf("task file %s is in the agent view", p)
		case !strings.Contains(c, "CANARY") && (err != nil || string(b) != c):
			t.Errorf("data file %s: %q, %v", p, b, err)
		}
	}
	if f, err := schemas.FindVerifierOnly(dst); err != nil || f != "" {
		t.Fatalf("agent view holds %q (%v)", f, err)
	}
	if f, err := schemas.FindVerifierOnly(src); err != nil || f == "" {
		t.Fatalf("positive control: the upstream folder has no task file found (%v)", err)
	}
	up, err := UpstreamHashes(src)
	if err != nil || up != h {
		t.Fatalf("UpstreamHashes %+v, StageUpstream %+v (%v)", up, h, err)
	}
	if _, err := StageUpstream(src, filepath.Join(src, "view")); err == nil {
		t.Fatal("an agent view inside the task folder was accepted")
	}
	if _, err := StageUpstream(src, filepath.Dir(src)); err == nil {
		t.Fatal("an agent view holding the task folder (which staging replaces) was accepted")
	}
	if _, err := os.Stat(filepath.Join(src, "mimic_iii", "valid_tasks.jsonl")); err != nil {
		t.Fatalf("the task folder was damaged: %v", err)
	}
}

// TestUpstreamTaskFilesAreVerifierOnly keeps schemas.VerifierOnlyFile in
// step with the files LoadUpstream reads.
func TestUpstreamTaskFilesAreVerifierOnly(t *testing.T) {
	for ds, sp := range upstreamSpecs {
		for _, f := range []string{sp.train, sp.test} {
			if !schemas.VerifierOnlyFile(f) {
				t.Errorf("%s: task file %s is not verifier-only in schemas.VerifierOnlyFile", ds, f)
			}
		}
	}
	if !schemas.VerifierOnlyFile(BioCoderOutputsFile) {
		t.Errorf("BioCoder's reference outputs %s are not verifier-only", BioCoderOutputsFile)
	}
	for _, split := range []string{"train", "test"} {
		if !schemas.VerifierOnlyFile(split + ".jsonl") {
			t.Errorf("library task file %s.jsonl is not verifier-only", split)
		}
	}
	if schemas.VerifierOnlyFile("PATIENTS.csv") || schemas.VerifierOnlyFile(schemas.AgentManifestFile) {
		t.Error("a data file counts as verifier-only")
	}
}
