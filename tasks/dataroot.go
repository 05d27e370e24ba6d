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
// build/library in the repository that holds the working directory (or the
// running binary), else
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
// go.work, else the one above the running binary (bin/medgym of a checkout
// run from elsewhere), or "".
func RepoRoot() string {
	var from []string
	if dir, err := os.Getwd(); err == nil {
		from = append(from, dir)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		from = append(from, filepath.Dir(exe))
	}
	return repoRootFrom(from...)
}

// repoRootFrom is the nearest directory holding go.work above the first of
// dirs that has one, or "".
func repoRootFrom(dirs ...string) string {
	for _, dir := range dirs {
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
				return d
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return ""
}
