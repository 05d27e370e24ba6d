package tasks

import (
	"os"
	"path/filepath"
)

// DataRoot is the shared data directory: $MEDGYM_DATA, else
// ../shared/data beside the repository (the directory holding go.work)
// that holds the working directory, else "../shared/data". The CLI's
// --data default and every test that needs the data use it.
func DataRoot() string {
	if d := os.Getenv("MEDGYM_DATA"); d != "" {
		return d
	}
	if repo := RepoRoot(); repo != "" {
		return filepath.Join(repo, "..", "shared", "data")
	}
	return filepath.Join("..", "shared", "data")
}

// LibraryDir is the generated task library: $MEDGYM_LIBRARY, else
// build/library in the repository that holds the working directory, else
// "build/library".
func LibraryDir() string {
	if d := os.Getenv("MEDGYM_LIBRARY"); d != "" {
		return d
	}
	if repo := RepoRoot(); repo != "" {
		return filepath.Join(repo, "build", "library")
	}
	return filepath.Join("build", "library")
}

// RepoRoot is the nearest directory above the working directory holding
// go.work, or "".
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}
