package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// errNotFound is returned by backend.get for a missing key.
var errNotFound = errors.New("not found")

// ErrExists is returned (wrapped) by a create-only write of a key that is
// already there: the write did not happen, the object there is unchanged.
var ErrExists = errors.New("object exists")

// backend is where objects live: a directory or an S3 bucket prefix. Keys
// are slash-separated and relative to the store root.
type backend interface {
	// put stores data under key durably, replacing what is there.
	put(ctx context.Context, key string, data []byte) error
	// create stores data under key durably if nothing is there yet, as one
	// atomic step (two creates of one key: exactly one succeeds); else it
	// returns an error wrapping ErrExists and changes nothing.
	create(ctx context.Context, key string, data []byte) error
	// get returns the object's bytes, or an error wrapping errNotFound.
	get(ctx context.Context, key string) ([]byte, error)
	// list returns every key under prefix, sorted.
	list(ctx context.Context, prefix string) ([]string, error)
	ping(ctx context.Context) error
	// locate turns a key into a locator a person can use (path or URL).
	locate(key string) string
}

// dirBackend stores objects as files under root.
type dirBackend struct{ root string }

func newDirBackend(root string) (*dirBackend, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("open store %s: %w", root, err)
	}
	return &dirBackend{root: abs}, nil
}

func (d *dirBackend) path(key string) string { return filepath.Join(d.root, filepath.FromSlash(key)) }

func (d *dirBackend) locate(key string) string { return d.path(key) }

// put writes a temporary file in the target directory, syncs it, renames
// it over the target and syncs the directory, so the object is either
// wholly there or absent after a crash.
func (d *dirBackend) put(_ context.Context, key string, data []byte) error {
	if err := d.write(key, data, os.Rename); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// create is put with a hard link instead of the rename: link(2) fails
// when the target exists, so of two creates of one key exactly one lands,
// and a reader never sees a partial file. The temporary file is removed
// either way.
func (d *dirBackend) create(_ context.Context, key string, data []byte) error {
	err := d.write(key, data, func(tmp, dst string) error {
		err := os.Link(tmp, dst)
		_ = os.Remove(tmp)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %w", ErrExists, err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create %s: %w", key, err)
	}
	return nil
}

// write writes data to a synced temporary file beside key's path, hands
// it to publish (which moves or links it to the target), and syncs the
// directory.
func (d *dirBackend) write(key string, data []byte, publish func(tmp, dst string) error) (err error) {
	dst := d.path(key)
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = publish(f.Name(), dst); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	df, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer df.Close()
	if err := df.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

func (d *dirBackend) get(_ context.Context, key string) ([]byte, error) {
	b, err := os.ReadFile(d.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s: %w", key, errNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return b, nil
}

func (d *dirBackend) list(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	// Walk from the deepest directory the prefix names, then filter.
	start := d.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = d.path(prefix[:i])
	}
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		if key := filepath.ToSlash(rel); strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}

func (d *dirBackend) ping(context.Context) error {
	st, err := os.Stat(d.root)
	if err != nil {
		return fmt.Errorf("ping store %s: %w", d.root, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("ping store %s: not a directory", d.root)
	}
	return nil
}

// writeLocal writes r to a new local file at path, creating its parents.
func writeLocal(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
