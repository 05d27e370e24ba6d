package query_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/query"
)

// TestQueryIsLockedDown (issue 13 item 7): `medgym query` could read and
// write any file. Now only one read-only statement over the store's own
// files runs; the positive control shows the view still works.
func TestQueryIsLockedDown(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(ctx, []parquet.Row{rowOf("a", "mimic", 1, 2)}); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.csv")
	if err := os.WriteFile(secret, []byte("k,v\npassword,hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "stolen.csv")

	if _, rows, err := query.Query(ctx, dir, "SELECT count(*) FROM trajectories"); err != nil || len(rows) != 1 {
		t.Fatalf("positive control: %v %v", rows, err)
	}
	if _, rows, err := query.Query(ctx, dir, "WITH x AS (SELECT episode_id FROM trajectories) SELECT * FROM x"); err != nil || len(rows) != 1 {
		t.Fatalf("positive control (WITH): %v %v", rows, err)
	}
	if _, rows, err := query.Query(ctx, dir, "DESCRIBE trajectories"); err != nil || len(rows) < 10 {
		t.Fatalf("positive control (DESCRIBE): %d rows, %v", len(rows), err)
	}
	// A relative store path (the CLI's default is "runs") is allowed too.
	t.Chdir(filepath.Dir(dir))
	if _, rows, err := query.Query(ctx, filepath.Base(dir), "SELECT count(*) FROM trajectories"); err != nil || len(rows) != 1 {
		t.Fatalf("positive control (relative store path): %v %v", rows, err)
	}
	for name, q := range map[string]string{
		"read_csv elsewhere":       "SELECT * FROM read_csv(" + sq(secret) + ")",
		"bare file elsewhere":      "SELECT * FROM " + sq(secret),
		"read_text":                "SELECT * FROM read_text('/etc/passwd')",
		"copy to a file":           "COPY (SELECT * FROM trajectories) TO " + sq(out),
		"copy after a select":      "SELECT 1; COPY (SELECT 1) TO " + sq(out),
		"two selects":              "SELECT 1; SELECT 2",
		"create table":             "CREATE TABLE t AS SELECT * FROM trajectories",
		"attach":                   "ATTACH " + sq(filepath.Join(t.TempDir(), "x.db")) + " AS x",
		"install extension":        "INSTALL httpfs",
		"load extension":           "LOAD httpfs",
		"turn access back on":      "SET enable_external_access = true",
		"export":                   "EXPORT DATABASE " + sq(t.TempDir()),
		"pragma":                   "PRAGMA enable_profiling",
		"select reading elsewhere": "SELECT (SELECT count(*) FROM read_csv(" + sq(secret) + ")) FROM trajectories",
	} {
		_, rows, err := query.Query(ctx, dir, q)
		if err == nil {
			t.Errorf("%s: ran (%v)", name, rows)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the file: %v", name, err)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a query wrote %s", out)
	}
	// EXPLAIN ANALYZE runs the statement it explains: a COPY into the store's
	// own trajectories directory (the one place the lock-down lets a query
	// read) must neither add a file there nor overwrite a run's Parquet.
	// The forged part goes beside the run's own, in a directory that exists,
	// so that on code which lets EXPLAIN ANALYZE through the COPY succeeds.
	parts, err := filepath.Glob(filepath.Join(dir, "trajectories", "run=*", "dataset=*"))
	if err != nil || len(parts) == 0 {
		t.Fatalf("no run directory in the store: %v %v", parts, err)
	}
	before := storeFiles(t, dir)
	forged := filepath.Join(parts[0], "part-forged.parquet")
	for name, q := range map[string]string{
		"explain analyze copy":         "EXPLAIN ANALYZE COPY (SELECT * FROM trajectories) TO " + sq(forged) + " (FORMAT parquet)",
		"explain analyze comment copy": "EXPLAIN /* x */ ANALYZE COPY (SELECT * FROM trajectories) TO " + sq(forged) + " (FORMAT parquet)",
		"plain explain":                "EXPLAIN SELECT * FROM trajectories",
	} {
		if _, _, err := query.Query(ctx, dir, q); !errors.Is(err, query.ErrNotReadOnly) {
			t.Errorf("%s: %v, want ErrNotReadOnly", name, err)
		}
	}
	if after := storeFiles(t, dir); !slices.Equal(before, after) {
		t.Errorf("the store changed under EXPLAIN ANALYZE: %v, was %v", after, before)
	}
	// Not-read-only statements are refused by type, before they run.
	if _, _, err := query.Query(ctx, dir, "CREATE TABLE t (x INT)"); !errors.Is(err, query.ErrNotReadOnly) {
		t.Errorf("CREATE TABLE: %v, want ErrNotReadOnly", err)
	}
}

// storeFiles lists every file under the store with its size and mtime.
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %d", p, fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sq(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
