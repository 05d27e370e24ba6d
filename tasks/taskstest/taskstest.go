// Package taskstest holds test helpers over the task library's fixtures,
// shared by the tests of the CLI and of the systemtest module.
package taskstest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/medgym/medgym/tasks"
)

// UpstreamFolder is a MedAgentGym task folder as a user has it: one task
// file, <dataset>/<file>, copied from the fixture folder fixture under
// tasks/testdata, in a temporary directory.
func UpstreamFolder(t testing.TB, fixture, dataset, file string) string {
	t.Helper()
	root := tasks.RepoRoot()
	if root == "" {
		t.Fatal("no go.work above the test directory")
	}
	src, err := os.ReadFile(filepath.Join(root, "tasks", "testdata", fixture, dataset, file))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, dataset), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, dataset, file), src, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
