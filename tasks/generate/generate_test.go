package generate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

// TestLibraryTrees generates a dataset and checks the split: the agent tree
// has its data and no task file, the verifier tree has the task files, both
// manifests hash what is there, and the hashes are the same on a second
// generation.
func TestLibraryTrees(t *testing.T) {
	var hashes []schemas.TreeHashes
	for range 2 {
		lib := t.TempDir()
		// A library of the old one-tree layout is replaced, answers and all.
		if err := os.MkdirAll(filepath.Join(lib, tasks.NPowerDataset), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lib, tasks.NPowerDataset, "test.jsonl"), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := Generate(t.Context(), dataRoot(t), lib, []string{tasks.NPowerDataset}); err != nil {
			t.Fatal(err)
		}
		if f, err := schemas.FindVerifierOnly(tasks.AgentTree(lib)); err != nil || f != "" {
			t.Fatalf("agent tree holds the verifier-only file %q (%v)", f, err)
		}
		if f, err := schemas.FindVerifierOnly(tasks.VerifierTree(lib)); err != nil || f == "" {
			t.Fatalf("positive control: no verifier-only file found in the verifier tree (%v)", err)
		}
		for _, p := range []string{filepath.Join(tasks.AgentTree(lib), tasks.NPowerDataset, "LICENSE.md"),
			filepath.Join(tasks.VerifierTree(lib), tasks.NPowerDataset, "LICENSE.md"), // the task files' licence travels with them
			filepath.Join(tasks.VerifierTree(lib), tasks.NPowerDataset, "test.jsonl"), filepath.Join(tasks.VerifierTree(lib), tasks.NPowerDataset, "train.jsonl")} {
			if _, err := os.Stat(p); err != nil {
				t.Error(err)
			}
		}
		for _, d := range []string{".generate-" + tasks.NPowerDataset, tasks.NPowerDataset} {
			if _, err := os.Stat(filepath.Join(lib, d)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left behind: %v", d, err)
			}
		}
		h, err := tasks.LibraryHashes(lib)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(h.Agent, "sha256:") || !strings.HasPrefix(h.Verifier, "sha256:") || h.Agent == h.Verifier {
			t.Fatalf("hashes %+v", h)
		}
		// The manifests hash what is on disk: a changed task file changes
		// the verifier hash only.
		again, err := tasks.WriteManifests(lib)
		if err != nil || again != h {
			t.Fatalf("rehash: %+v, want %+v (%v)", again, h, err)
		}
		f := filepath.Join(tasks.VerifierTree(lib), tasks.NPowerDataset, "test.jsonl")
		b, _ := os.ReadFile(f)
		if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		changed, err := tasks.WriteManifests(lib)
		if err != nil || changed.Agent != h.Agent || changed.Verifier == h.Verifier {
			t.Fatalf("after changing a task file: %+v, before %+v (%v)", changed, h, err)
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if ts, err := tasks.Load(t.Context(), tasks.Source{Dataset: tasks.NPowerDataset, Split: "test", LibraryDir: lib}); err != nil || len(ts) == 0 {
			t.Fatalf("load from the verifier tree: %d tasks, %v", len(ts), err)
		}
		hashes = append(hashes, h)
	}
	if hashes[0] != hashes[1] {
		t.Errorf("two generations hash differently: %+v vs %+v", hashes[0], hashes[1])
	}
}
