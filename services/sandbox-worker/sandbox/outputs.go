package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/medgym/medgym/schemas"
)

// readOutputFiles reads the task's output files from an episode workspace
// on the host, for the verifier. Names are workspace-relative; a name that
// is absolute or leaves the workspace, a symlink (anywhere on the path that
// would leave the workspace, or as the last component), a non-regular file
// or one over schemas.MaxOutputFileBytes is not returned. Missing files are
// omitted silently; the others give a note for the agent.
func readOutputFiles(workspace string, names []string) (map[string]string, []string) {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, nil
	}
	defer root.Close()
	var (
		files map[string]string
		notes []string
	)
	for _, name := range names {
		data, err := readOutputFile(root, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			notes = append(notes, fmt.Sprintf("output file %q was not collected: %v", name, err))
			continue
		}
		if files == nil {
			files = make(map[string]string, len(names))
		}
		files[name] = data
	}
	return files, notes
}

var errNotRegular = errors.New("not a regular file (symlinks are refused)")

func readOutputFile(root *os.Root, name string) (string, error) {
	clean := path.Clean(name)
	if name == "" || path.IsAbs(name) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", errors.New("the path must be relative and inside the workspace")
	}
	// os.Root refuses paths (and symlinks) that escape the workspace. A
	// symlink as the last component is refused even if it points inside (os.Root
	// follows it on open, so Lstat first and check the opened file is the
	// same one), so the file read is the one the agent's code wrote.
	lst, err := root.Lstat(clean)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", errors.New("cannot be opened inside the workspace")
	}
	if !lst.Mode().IsRegular() {
		return "", errNotRegular
	}
	f, err := root.OpenFile(clean, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", errors.New("cannot be opened inside the workspace")
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || !os.SameFile(st, lst) {
		return "", errNotRegular
	}
	if st.Size() > schemas.MaxOutputFileBytes {
		return "", fmt.Errorf("larger than the %d MiB limit", schemas.MaxOutputFileBytes>>20)
	}
	b, err := io.ReadAll(io.LimitReader(f, schemas.MaxOutputFileBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > schemas.MaxOutputFileBytes {
		return "", fmt.Errorf("larger than the %d MiB limit", schemas.MaxOutputFileBytes>>20)
	}
	return string(b), nil
}
