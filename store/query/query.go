package query

import (
	"context"
	"database/sql"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/duckdb/duckdb-go/v2" // also registers the "duckdb" database/sql driver
)

// View returns the SQL that defines the trajectories view over dir.
func View(dir string) string {
	glob := filepath.ToSlash(filepath.Join(dir, "trajectories")) + "/**/*.parquet"
	return "CREATE VIEW trajectories AS SELECT * FROM read_parquet(" + quote(glob) +
		", hive_partitioning = true, union_by_name = true)"
}

// quote makes s a SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Limits bound what one query may use. DuckDB's defaults take 80 % of the
// machine's memory and every core: a careless SELECT * FROM range(400000000)
// would take the host with it.
type Limits struct {
	// MemoryLimit is DuckDB's memory_limit ("1GB", "512MB"); a query that
	// needs more fails with DuckDB's out-of-memory error.
	MemoryLimit string
	// Threads is DuckDB's thread count.
	Threads int
	// MaxRows bounds the result: DuckDB's Go driver materialises a result
	// before the first row is read (its results do not count against
	// memory_limit), so the query runs with a LIMIT of MaxRows+1 and a
	// result with more rows ends, after MaxRows are written, with
	// ErrTooManyRows. 0 means no bound.
	MaxRows int
}

// DefaultLimits are the limits medgym query uses unless told otherwise.
func DefaultLimits() Limits { return Limits{MemoryLimit: "1GB", Threads: 2, MaxRows: 1_000_000} }

// ErrTooManyRows ends a query whose result has more than Limits.MaxRows rows.
var ErrTooManyRows = errors.New("the result has more rows than the row limit")

// Validate reports a limit DuckDB would refuse or that removes the bound.
func (l Limits) Validate() error {
	if l.Threads < 1 {
		return fmt.Errorf("query: threads %d (want at least 1)", l.Threads)
	}
	if l.MaxRows < 0 {
		return fmt.Errorf("query: max rows %d (want 0 for no bound, or more)", l.MaxRows)
	}
	if l.MemoryLimit == "" || strings.ContainsAny(l.MemoryLimit, "'\\;") {
		return fmt.Errorf("query: memory limit %q (want a size such as 1GB)", l.MemoryLimit)
	}
	return nil
}

// RowWriter receives a query's result as DuckDB produces it: the column
// names once, then each row (the slice is not kept by the caller: copy what
// you keep), then Flush. An error from Row stops the query.
type RowWriter interface {
	Header(cols []string) error
	Row(vals []any) error
	Flush() error
}

// Query runs query over the store copy in dir and returns the column names
// and all rows. Values are as database/sql scans them from DuckDB (string,
// int64, float64, bool, time.Time, []any for lists, map[string]any for
// structs, nil for NULL). It holds every row: for large results use Stream.
func Query(ctx context.Context, dir string, query string) (cols []string, rows [][]any, err error) {
	c := &collect{}
	if err := Stream(ctx, dir, query, DefaultLimits(), c); err != nil {
		return nil, nil, err
	}
	return c.cols, c.rows, nil
}

// collect is the RowWriter behind Query.
type collect struct {
	cols []string
	rows [][]any
}

func (c *collect) Header(cols []string) error { c.cols = cols; return nil }
func (c *collect) Row(vals []any) error {
	c.rows = append(c.rows, append([]any(nil), vals...))
	return nil
}
func (c *collect) Flush() error { return nil }

// Stream runs query over the store copy in dir under lim and hands the
// result to w row by row: at most lim.MaxRows rows are produced and held
// at once. The query stops when ctx ends (DuckDB is interrupted) or w
// returns an error.
func Stream(ctx context.Context, dir string, query string, lim Limits, w RowWriter) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return fmt.Errorf("open duckdb: %w", err)
	}
	defer db.Close()
	// An in-memory DuckDB database exists per connection: keep one.
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("open duckdb: %w", err)
	}
	defer conn.Close()
	matches, err := filepath.Glob(filepath.Join(dir, "trajectories", "run=*", "dataset=*", "*.parquet"))
	if err != nil {
		return fmt.Errorf("query %s: %w", dir, err)
	}
	if len(matches) == 0 {
		return fmt.Errorf("query %s: no trajectory files under %s", dir, filepath.Join(dir, "trajectories"))
	}
	if _, err := conn.ExecContext(ctx, View(dir)); err != nil {
		return fmt.Errorf("query %s: create view: %w", dir, err)
	}
	if err := lockDown(ctx, conn, dir, lim); err != nil {
		return fmt.Errorf("query %s: %w", dir, err)
	}
	if err := checkStatement(ctx, conn, query); err != nil {
		return err
	}
	run := query
	if lim.MaxRows > 0 {
		// The statement is one SELECT (readOnly): as a subquery its order is
		// kept, and the LIMIT stops DuckDB producing rows past the bound.
		// DuckDB's query() parses the text as a whole statement (a
		// semicolon and comments after it included, which pasted into
		// parentheses were a syntax error), quoted as one string literal.
		run = "SELECT * FROM query(" + quote(query) + ") LIMIT " + strconv.Itoa(lim.MaxRows+1)
		// What the wrapper made is checked again.
		if err := checkStatement(ctx, conn, run); err != nil {
			return err
		}
	}
	rs, err := conn.QueryContext(ctx, run)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("query: %w", context.Cause(ctx))
		}
		return fmt.Errorf("query: %w", err)
	}
	defer rs.Close()
	cols, err := rs.Columns()
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	if err := w.Header(cols); err != nil {
		return err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	n := 0
	for rs.Next() {
		if n++; lim.MaxRows > 0 && n > lim.MaxRows {
			if err := w.Flush(); err != nil {
				return err
			}
			return fmt.Errorf("query: %w: wrote the first %d (aggregate, add a LIMIT, or raise the limit)", ErrTooManyRows, lim.MaxRows)
		}
		clear(vals)
		if err := rs.Scan(ptrs...); err != nil {
			return fmt.Errorf("query: scan: %w", err)
		}
		if err := w.Row(vals); err != nil {
			return err
		}
	}
	if err := rs.Err(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("query: %w", context.Cause(ctx))
		}
		return fmt.Errorf("query: %w", err)
	}
	return w.Flush()
}

// lockDown confines the connection to the store's trajectory files: no
// other file, URL or database can be read or written (external access off,
// with the trajectories directory allowed), no extension is installed or
// loaded behind the query's back, memory and threads are bounded by lim,
// and the configuration is locked so the query cannot undo any of it.
func lockDown(ctx context.Context, conn *sql.Conn, dir string, lim Limits) error {
	abs, err := filepath.Abs(filepath.Join(dir, "trajectories"))
	if err != nil {
		return fmt.Errorf("lock down: %w", err)
	}
	for _, stmt := range []string{
		"SET autoinstall_known_extensions = false",
		"SET autoload_known_extensions = false",
		"SET allowed_directories = [" + quote(filepath.ToSlash(abs)+"/") + "]",
		"SET enable_external_access = false",
		"SET memory_limit = " + quote(lim.MemoryLimit),
		"SET threads = " + strconv.Itoa(lim.Threads),
		// Nothing spills to disk: the memory limit is the query's whole budget.
		"SET max_temp_directory_size = '0B'",
		"SET lock_configuration = true",
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("lock down: %s: %w", stmt, err)
		}
	}
	return nil
}

// checkStatement refuses a statement that is not read-only (readOnly; a
// test replaces it to show that Confine holds where it would not).
var checkStatement = readOnly

// ErrNotReadOnly is returned for a query that is not one read-only
// statement.
var ErrNotReadOnly = errors.New("only one read-only statement (SELECT, WITH ... SELECT, DESCRIBE) is allowed")

// readOnly accepts exactly one SELECT statement (DESCRIBE is one). DuckDB's
// own parser decides (preparing runs nothing), so comments, quoting and
// several statements cannot smuggle a write past it. EXPLAIN is refused:
// EXPLAIN ANALYZE executes the statement it explains (a COPY ... TO into the
// store's own trajectories directory, which the lock-down must allow for
// reading, would write or overwrite Parquet there), and the statement type
// of an EXPLAIN does not say whether ANALYZE is in it.
func readOnly(ctx context.Context, conn *sql.Conn, query string) error {
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*duckdb.Conn)
		if !ok {
			return fmt.Errorf("query: unexpected driver connection %T", dc)
		}
		// Prepare (without a context) refuses more than one statement.
		st, err := c.Prepare(query)
		if err != nil {
			return fmt.Errorf("query: %w (%w)", err, ErrNotReadOnly)
		}
		defer st.Close()
		typ, err := st.(*duckdb.Stmt).StatementType()
		if err != nil {
			return fmt.Errorf("query: statement type: %w", err)
		}
		switch typ {
		case duckdb.STATEMENT_TYPE_SELECT:
			return nil
		}
		return fmt.Errorf("query: %w", ErrNotReadOnly)
	})
}

// Format renders one value for people: NULL for nil, shortest decimal for
// floats, RFC 3339 for times, and fmt's %v otherwise.
func Format(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return x
	case []byte:
		return string(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

// Printable makes s safe to show on a terminal: control characters (the
// escape that starts a terminal sequence, NUL, DEL, C1), bidirectional
// overrides and isolates (which reorder what a reader sees), and invalid
// UTF-8 are written as Go escapes (\x1b, \u202e); a tab or newline is a
// space and a literal \n so that a table keeps one line per row.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || isBidi(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteByte(' ')
		case r == '\n':
			b.WriteString(`\n`)
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || isBidi(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// isBidi reports the Unicode bidirectional formatting characters: marks,
// embeddings, overrides and isolates.
func isBidi(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// TableRows is how many rows a table lays out at once: the columns are as
// wide as the widest cell of their block, and a block is written before the
// next is read, so a table of any length streams.
const TableRows = 1000

// NewTableWriter returns a RowWriter that writes an aligned text table to
// w, every cell through Printable.
func NewTableWriter(w io.Writer) RowWriter { return &tableWriter{out: w} }

type tableWriter struct {
	out  io.Writer
	tw   *tabwriter.Writer
	rows int
}

func (t *tableWriter) line(cells []string) {
	for i := range cells {
		cells[i] = Printable(cells[i])
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *tableWriter) Header(cols []string) error {
	t.tw = tabwriter.NewWriter(t.out, 0, 0, 2, ' ', 0)
	t.line(append([]string(nil), cols...))
	sep := make([]string, len(cols))
	for i, c := range cols {
		sep[i] = strings.Repeat("-", max(len(c), 3))
	}
	t.line(sep)
	return nil
}

func (t *tableWriter) Row(vals []any) error {
	cells := make([]string, len(vals))
	for i, v := range vals {
		cells[i] = Format(v)
	}
	t.line(cells)
	if t.rows++; t.rows%TableRows == 0 {
		return t.Flush()
	}
	return nil
}

func (t *tableWriter) Flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// NewCSVWriter returns a RowWriter that writes CSV (RFC 4180) to w, NULL as
// an empty field. Cells are written as they are (CSV is for programs).
func NewCSVWriter(w io.Writer) RowWriter { return &csvWriter{cw: csv.NewWriter(w)} }

type csvWriter struct {
	cw  *csv.Writer
	rec []string
}

func (c *csvWriter) Header(cols []string) error {
	if err := c.cw.Write(cols); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

func (c *csvWriter) Row(vals []any) error {
	c.rec = c.rec[:0]
	for _, v := range vals {
		cell := ""
		if v != nil {
			cell = Format(v)
		}
		c.rec = append(c.rec, cell)
	}
	if err := c.cw.Write(c.rec); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

func (c *csvWriter) Flush() error {
	c.cw.Flush()
	if err := c.cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

// WriteTable writes cols and rows as an aligned text table.
func WriteTable(w io.Writer, cols []string, rows [][]any) error {
	return writeAll(NewTableWriter(w), cols, rows)
}

// WriteCSV writes cols and rows as CSV (RFC 4180), NULL as an empty field.
func WriteCSV(w io.Writer, cols []string, rows [][]any) error {
	return writeAll(NewCSVWriter(w), cols, rows)
}

func writeAll(w RowWriter, cols []string, rows [][]any) error {
	if err := w.Header(cols); err != nil {
		return err
	}
	for _, r := range rows {
		if err := w.Row(r); err != nil {
			return err
		}
	}
	return w.Flush()
}
