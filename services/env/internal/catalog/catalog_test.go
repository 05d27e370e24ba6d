package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/internal/session"
)

func view(id, ds, split string) schemas.TaskView {
	return schemas.TaskView{ID: id, Dataset: ds, Split: split, Question: "q", PermittedActions: []string{"validate_code"}}
}

// TestCatalog: views written are read back, listed in pages and found by
// id; an ambiguous id needs its dataset and split; a directory holding
// ground truth (a verifier-only file, or a task line) is refused.
func TestCatalog(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, "a", "test", []schemas.TaskView{view("a-1", "a", "test"), view("x", "a", "test")}); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, "b", "train", []schemas.TaskView{view("x", "b", "train")}); err != nil {
		t.Fatal(err)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ds := c.Datasets(); len(ds) != 2 || ds[0] != "a" {
		t.Fatalf("datasets %v", ds)
	}
	page, total, err := c.List("", "", 1, 1)
	if err != nil || total != 3 || len(page) != 1 || page[0].ID != "x" {
		t.Fatalf("page: %v %d %v", page, total, err)
	}
	if _, _, err := c.List("zzz", "", 1, 0); !errors.Is(err, session.ErrUnknownDataset) {
		t.Fatalf("unknown dataset: %v", err)
	}
	if _, err := c.Find("x", "", ""); !errors.Is(err, session.ErrAmbiguousTask) {
		t.Fatalf("ambiguous: %v", err)
	}
	if v, err := c.Find("x", "b", ""); err != nil || v.Dataset != "b" {
		t.Fatalf("x in b: %v %v", v, err)
	}
	if _, err := c.Find("nope", "", ""); !errors.Is(err, session.ErrUnknownTask) {
		t.Fatalf("unknown task: %v", err)
	}

	bad := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bad, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	line := `{"view": {"id": "a-1", "dataset": "a", "split": "test", "question": "q"}, "truth": {"answer": "42"}}` + "\n"
	if err := os.WriteFile(filepath.Join(bad, "a", "test"+Suffix), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil {
		t.Fatal("a task line (view and truth) was accepted as a view")
	}
	if err := os.WriteFile(filepath.Join(bad, "a", "test.jsonl"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil {
		t.Fatal("a directory with a verifier-only file was accepted")
	}
}
