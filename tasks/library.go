package tasks

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNoLibrary says the task library has not been generated.
var ErrNoLibrary = errors.New("task library not generated")

// WriteTasks writes ts as JSON lines to path (one Task per line), the
// format loadLibrary reads.
func WriteTasks(path string, ts []Task) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write tasks: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range ts {
		if err := enc.Encode(&ts[i]); err != nil {
			_ = f.Close()
			return fmt.Errorf("write tasks %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write tasks %s: %w", path, err)
	}
	return f.Close()
}

// loadLibrary reads <LibraryDir>/verifier/<dataset>/<split>.jsonl.
func loadLibrary(ctx context.Context, src Source) ([]Task, error) {
	if src.LibraryDir == "" {
		return nil, fmt.Errorf("%w: dataset %s needs --library (run `make library`)", ErrNoLibrary, src.Dataset)
	}
	path := filepath.Join(VerifierTree(src.LibraryDir), src.Dataset, src.Split+".jsonl")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && OldLayout(src.LibraryDir, src.Dataset) {
		return nil, fmt.Errorf("%w: %s has the old one-tree layout (task files next to the data, readable by agent code); regenerate it (`make library`)", ErrNoLibrary, src.LibraryDir)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s is missing (run `make library` or `medgym tasks generate --library %s`)", ErrNoLibrary, path, src.LibraryDir)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Task
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var t Task
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if err := t.View.Validate(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}
