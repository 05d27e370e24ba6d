package tasks

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDataRoot: the environment wins; else the directory beside the
// repository, found from any directory inside it; outside one, the
// relative default.
func TestDataRoot(t *testing.T) {
	t.Setenv("MEDGYM_DATA", "/x/data")
	t.Setenv("MEDGYM_LIBRARY", "/x/lib")
	if DataRoot() != "/x/data" || LibraryDir() != "/x/lib" {
		t.Errorf("env ignored: %s %s", DataRoot(), LibraryDir())
	}
	t.Setenv("MEDGYM_DATA", "")
	t.Setenv("MEDGYM_LIBRARY", "")
	repo := t.TempDir()
	if err := os.WriteFile(filepath.Join(repo, "go.work"), []byte("go 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(repo, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(deep)
	if got, want := DataRoot(), filepath.Join(repo, "..", "shared", "data"); got != want {
		t.Errorf("DataRoot in a repo = %s, want %s", got, want)
	}
	if got, want := LibraryDir(), filepath.Join(repo, "build", "library"); got != want {
		t.Errorf("LibraryDir in a repo = %s, want %s", got, want)
	}
	t.Chdir(t.TempDir())
	if got := DataRoot(); got != filepath.Join("..", "shared", "data") {
		t.Errorf("DataRoot outside a repo = %s", got)
	}
}

// TestRepoRootFromTheBinary: run from outside any checkout, a checkout's
// bin/medgym finds its repository (and so its library and data) from its
// own location; the working directory's repository comes first.
func TestRepoRootFromTheBinary(t *testing.T) {
	repo, other, outside := t.TempDir(), t.TempDir(), t.TempDir()
	for _, r := range []string{repo, other} {
		if err := os.WriteFile(filepath.Join(r, "go.work"), []byte("go 1.26\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(repo, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := repoRootFrom(outside, bin); got != repo {
		t.Errorf("from outside with the binary in %s: %q, want %q", bin, got, repo)
	}
	if got := repoRootFrom(other, bin); got != other {
		t.Errorf("from inside another checkout: %q, want %q", got, other)
	}
	if got := repoRootFrom(outside); got != "" {
		t.Errorf("from outside, no binary in a checkout: %q", got)
	}
}
