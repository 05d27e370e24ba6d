package query_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/query"
)

// oneRunStore writes a store with a single small run and returns its directory.
func oneRunStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(t.Context(), []parquet.Row{rowOf("a", "mimic", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rowsOf is a RowWriter that keeps every row; stopAfter > 0 ends the query
// with errStop at that row.
type rowsOf struct {
	cols      []string
	rows      [][]any
	stopAfter int
	flushed   bool
}

var errStop = errors.New("stop")

func (r *rowsOf) Header(cols []string) error { r.cols = cols; return nil }
func (r *rowsOf) Row(v []any) error {
	r.rows = append(r.rows, append([]any(nil), v...))
	if r.stopAfter > 0 && len(r.rows) >= r.stopAfter {
		return errStop
	}
	return nil
}
func (r *rowsOf) Flush() error { r.flushed = true; return nil }

func TestQueryLimits(t *testing.T) {
	dir := oneRunStore(t)
	ctx := t.Context()

	t.Run("settings in force and locked", func(t *testing.T) {
		var w rowsOf
		lim := query.Limits{MemoryLimit: "96MB", Threads: 1, MaxRows: 10}
		if err := query.Stream(ctx, dir, "SELECT current_setting('memory_limit'), current_setting('threads'), current_setting('max_temp_directory_size')", lim, &w); err != nil {
			t.Fatal(err)
		}
		got := query.Format(w.rows[0][0]) + " " + query.Format(w.rows[0][1]) + " " + query.Format(w.rows[0][2])
		// DuckDB reports 96MB as 91.5 MiB.
		if !strings.Contains(got, "MiB 1 0") {
			t.Errorf("settings: %q", got)
		}
		if !w.flushed {
			t.Error("writer not flushed")
		}
		for _, q := range []string{"SET memory_limit = '100GB'", "SET threads = 64", "RESET memory_limit"} {
			if err := query.Stream(ctx, dir, q, lim, &rowsOf{}); err == nil {
				t.Errorf("%s: accepted", q)
			}
		}
	})

	t.Run("over the memory limit", func(t *testing.T) {
		// One list of 30 million BIGINTs is 240 MB: over a 64 MB limit,
		// with nowhere to spill.
		err := query.Stream(ctx, dir, "SELECT len(list(x)) FROM range(30000000) t(x)", query.Limits{MemoryLimit: "64MB", Threads: 1}, &rowsOf{})
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "memory") {
			t.Fatalf("240 MB under a 64 MB limit: %v", err)
		}
	})

	t.Run("bad limits", func(t *testing.T) {
		for _, lim := range []query.Limits{{MemoryLimit: "1GB"}, {Threads: 1}, {MemoryLimit: "1GB'; SET threads=99; --", Threads: 1},
			{MemoryLimit: "1GB", Threads: 1, MaxRows: -1}} {
			if err := query.Stream(ctx, dir, "SELECT 1", lim, &rowsOf{}); err == nil {
				t.Errorf("%+v accepted", lim)
			}
		}
	})

	t.Run("rows bounded", func(t *testing.T) {
		// 400 million rows held whole take minutes and gigabytes (the driver
		// materialises a result before its first row is read); bounded, the
		// query produces 1,001 and the writer gets 1,000 and an error.
		lim := query.DefaultLimits()
		lim.MaxRows = 1000
		var w rowsOf
		err := query.Stream(ctx, dir, "SELECT * FROM range(400000000) -- all of them;\n;", lim, &w)
		if !errors.Is(err, query.ErrTooManyRows) || len(w.rows) != 1000 || !w.flushed {
			t.Fatalf("err %v after %d rows (flushed %v), want ErrTooManyRows after 1000", err, len(w.rows), w.flushed)
		}
		// The order of an ORDER BY is kept under the bound, and a result at
		// the bound is whole.
		w = rowsOf{}
		if err := query.Stream(ctx, dir, "SELECT x FROM range(1000) t(x) ORDER BY x DESC", lim, &w); err != nil || len(w.rows) != 1000 ||
			w.rows[0][0] != int64(999) || w.rows[999][0] != int64(0) {
			t.Fatalf("ordered 1000 rows: %v, %d rows, first %v", err, len(w.rows), w.rows[0])
		}
		w = rowsOf{}
		if err := query.Stream(ctx, dir, "DESCRIBE trajectories", lim, &w); err != nil || len(w.rows) < 10 {
			t.Fatalf("describe under the bound: %v, %d rows", err, len(w.rows))
		}
		// A statement ended by a semicolon and a comment (as a file of SQL
		// often is) runs under the bound as it does without it; a quote in
		// it stays the query's.
		for _, q := range []string{"SELECT 'a'')' AS x; -- the last line", "SELECT 'a'')' AS x;\n/* done */", "SELECT 'a'')' AS x -- ) LIMIT 0"} {
			w = rowsOf{}
			if err := query.Stream(ctx, dir, q, lim, &w); err != nil || len(w.rows) != 1 || w.rows[0][0] != "a')" {
				t.Errorf("%q under the bound: %v, rows %v", q, err, w.rows)
			}
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithTimeoutCause(ctx, 500*time.Millisecond, errors.New("query deadline"))
		defer cancel()
		err := query.Stream(ctx, dir, "SELECT count(*) FROM range(1000000000000) a(x), range(1000) b(y) WHERE x % 7 = y", query.DefaultLimits(), &rowsOf{})
		if err == nil {
			t.Fatal("a query over its deadline finished")
		}
		t.Logf("over its deadline: %v", err)
	})
}

func TestTableIsPrintable(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// What the agent's code printed reaches the row as it was printed.
	r := rowOf("ep1", "mimic", 1, 1)
	r.Turns[0].Stdout = "ep\x1b[2J\x1b]0;pwned\x07"
	r.Turns[0].Stderr = "a\u202eexe.txt\x00\u009b"
	if _, err := st.Write(t.Context(), []parquet.Row{r}); err != nil {
		t.Fatal(err)
	}
	var tbl, csvb strings.Builder
	if err := query.Stream(t.Context(), dir, "SELECT turns[1].stdout AS out, turns[1].stderr AS err FROM trajectories", query.DefaultLimits(), query.NewTableWriter(&tbl)); err != nil {
		t.Fatal(err)
	}
	out := tbl.String()
	for _, bad := range []string{"\x1b", "\x07", "\u202e", "\x00", "\u009b"} {
		if strings.Contains(out, bad) {
			t.Errorf("table holds %q raw:\n%s", bad, out)
		}
	}
	for _, want := range []string{`ep\x1b[2J\x1b]0;pwned\x07`, `a\u202eexe.txt\x00\x9b`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %s:\n%s", want, out)
		}
	}
	// CSV is for programs: the value as stored.
	if err := query.Stream(t.Context(), dir, "SELECT turns[1].stdout FROM trajectories", query.DefaultLimits(), query.NewCSVWriter(&csvb)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(csvb.String(), "ep\x1b[2J") {
		t.Errorf("csv changed the value: %q", csvb.String())
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain":            "plain",
		"tab\tnl\n":        `tab nl\n`,
		"héllo ✓":          "héllo ✓",
		"\x1b[31m":         `\x1b[31m`,
		"\u2066x\u2069":    `\u2066x\u2069`,
		"bad\xffutf8":      `bad\xffutf8`,
		"del\x7f c1\u0085": `del\x7f c1\x85`,
	} {
		if got := query.Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
