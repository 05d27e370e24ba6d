package query_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/query"
)

// The confined child's settings: the store, the scratch directory it may
// write, and whether it confines itself.
const (
	childStore   = "MEDGYM_QUERY_TEST_STORE"
	childScratch = "MEDGYM_QUERY_TEST_SCRATCH"
	childConfine = "MEDGYM_QUERY_TEST_CONFINE"
)

// TestQueryConfinedCannotWrite: the statement check was the only thing
// between a query and the store's files (DuckDB's allowed directory, the
// store's trajectories, is allowed for writing too), so a statement it
// missed (EXPLAIN ANALYZE COPY once was one) could add or overwrite a
// run's Parquet. A child process runs statements with the check switched
// off: unconfined, its COPY into the store writes a file there (the
// control); confined (Confine, as medgym query does), the same COPY, a
// COPY over an existing part, Go's own remove of it and a file written
// outside the store fail, the store is unchanged, the SELECT still
// answers, and the scratch directory it was given stays writable and
// removable.
func TestQueryConfinedCannotWrite(t *testing.T) {
	if dir := os.Getenv(childStore); dir != "" {
		confinedChild(dir, os.Getenv(childScratch), os.Getenv(childConfine) == "1")
		return
	}
	if abi, err := llsyscall.LandlockGetABIVersion(); err != nil || abi < 1 {
		t.Skipf("this kernel does not enforce Landlock (%v): Confine does nothing here", err)
	}
	for _, confine := range []bool{false, true} {
		dir, scratch := t.TempDir(), t.TempDir()
		st, err := store.Open(t.Context(), dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(t.Context(), []parquet.Row{rowOf("a", "mimic", 1, 2)}); err != nil {
			t.Fatal(err)
		}
		before := storeFiles(t, dir)
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestQueryConfinedCannotWrite$", "-test.count=1")
		cmd.Env = append(os.Environ(), childStore+"="+dir, childScratch+"="+scratch, childConfine+"="+map[bool]string{true: "1"}[confine])
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the child (confine %v): %v\n%s", confine, err, out)
		}
		got := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "REPORT "), ": "); ok && strings.HasPrefix(sc.Text(), "REPORT ") {
				got[k] = v
			}
		}
		after := storeFiles(t, dir)
		if !confine {
			if got["copy"] != "ok" || slices.Equal(before, after) {
				t.Fatalf("control: the unchecked COPY into the store did not write (%v); the test shows nothing\n%s", got, out)
			}
			continue
		}
		if got["confine"] != "ok" || got["select"] != "1 row" || got["scratch"] != "ok" || got["scratch removed"] != "ok" {
			t.Errorf("confined: the query or the scratch directory no longer works: %v\n%s", got, out)
		}
		for _, k := range []string{"copy", "overwrite", "remove", "elsewhere"} {
			if v := got[k]; v == "ok" || !strings.Contains(strings.ToLower(v), "permission denied") {
				t.Errorf("confined: %s: %q, want permission denied", k, v)
			}
		}
		if !slices.Equal(before, after) {
			t.Errorf("confined: the store changed: %v, was %v", after, before)
		}
	}
}

// confinedChild runs the statements and reports each outcome as a line
// "REPORT name: ok" or "REPORT name: error".
func confinedChild(dir, scratch string, confine bool) {
	ctx := context.Background()
	report := func(name string, err error) {
		v := "ok"
		if err != nil {
			v = strings.ReplaceAll(err.Error(), "\n", " ")
		}
		fmt.Printf("REPORT %s: %s\n", name, v)
	}
	if confine {
		report("confine", query.Confine(scratch))
	}
	query.SkipStatementCheck()
	lim := query.Limits{MemoryLimit: "256MB", Threads: 1}
	var n counter
	err := query.Stream(ctx, dir, "SELECT count(*) FROM trajectories", lim, &n)
	if err == nil {
		fmt.Printf("REPORT select: %d row\n", n)
	} else {
		report("select", err)
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "trajectories", "run=*", "dataset=*", "*.parquet"))
	if len(parts) == 0 {
		report("parts", fmt.Errorf("no part in %s", dir))
		return
	}
	forged := filepath.Join(filepath.Dir(parts[0]), "part-forged.parquet")
	report("copy", query.Stream(ctx, dir, "COPY (SELECT * FROM trajectories) TO "+sq(forged)+" (FORMAT parquet)", lim, &n))
	report("overwrite", query.Stream(ctx, dir, "COPY (SELECT 1 AS x) TO "+sq(parts[0])+" (FORMAT parquet)", lim, &n))
	report("remove", os.Remove(parts[0]))
	report("scratch", os.WriteFile(filepath.Join(scratch, "x"), []byte("x"), 0o600))
	report("scratch removed", os.RemoveAll(scratch))
	report("elsewhere", os.WriteFile(filepath.Join(filepath.Dir(scratch), "elsewhere-"+filepath.Base(scratch)), []byte("x"), 0o600))
}

// counter counts rows.
type counter int

func (c *counter) Header([]string) error { *c = 0; return nil }
func (c *counter) Row([]any) error       { *c++; return nil }
func (c *counter) Flush() error          { return nil }
