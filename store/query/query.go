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

// Query runs query over the store copy in dir and returns the column names
// and all rows. Values are as database/sql scans them from DuckDB (string,
// int64, float64, bool, time.Time, []any for lists, map[string]any for
// structs, nil for NULL).
func Query(ctx context.Context, dir string, query string) (cols []string, rows [][]any, err error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, nil, fmt.Errorf("open duckdb: %w", err)
	}
	defer db.Close()
	// An in-memory DuckDB database exists per connection: keep one.
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("open duckdb: %w", err)
	}
	defer conn.Close()
	matches, err := filepath.Glob(filepath.Join(dir, "trajectories", "run=*", "dataset=*", "*.parquet"))
	if err != nil {
		return nil, nil, fmt.Errorf("query %s: %w", dir, err)
	}
	if len(matches) == 0 {
		return nil, nil, fmt.Errorf("query %s: no trajectory files under %s", dir, filepath.Join(dir, "trajectories"))
	}
	if _, err := conn.ExecContext(ctx, View(dir)); err != nil {
		return nil, nil, fmt.Errorf("query %s: create view: %w", dir, err)
	}
	if err := lockDown(ctx, conn, dir); err != nil {
		return nil, nil, fmt.Errorf("query %s: %w", dir, err)
	}
	if err := readOnly(ctx, conn, query); err != nil {
		return nil, nil, err
	}
	rs, err := conn.QueryContext(ctx, query)
	if err != nil {
		return nil, nil, fmt.Errorf("query: %w", err)
	}
	defer rs.Close()
	cols, err = rs.Columns()
	if err != nil {
		return nil, nil, fmt.Errorf("query: %w", err)
	}
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, nil, fmt.Errorf("query: scan: %w", err)
		}
		rows = append(rows, vals)
	}
	if err := rs.Err(); err != nil {
		return nil, nil, fmt.Errorf("query: %w", err)
	}
	return cols, rows, nil
}

// lockDown confines the connection to the store's trajectory files: no
// other file, URL or database can be read or written (external access off,
// with the trajectories directory allowed), no extension is installed or
// loaded behind the query's back, and the configuration is locked so the
// query cannot undo any of it.
func lockDown(ctx context.Context, conn *sql.Conn, dir string) error {
	abs, err := filepath.Abs(filepath.Join(dir, "trajectories"))
	if err != nil {
		return fmt.Errorf("lock down: %w", err)
	}
	for _, stmt := range []string{
		"SET autoinstall_known_extensions = false",
		"SET autoload_known_extensions = false",
		"SET allowed_directories = [" + quote(filepath.ToSlash(abs)+"/") + "]",
		"SET enable_external_access = false",
		"SET lock_configuration = true",
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("lock down: %s: %w", stmt, err)
		}
	}
	return nil
}

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

// WriteTable writes cols and rows as an aligned text table.
func WriteTable(w io.Writer, cols []string, rows [][]any) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(cells []string) {
		for i := range cells {
			// Keep the table one line per row.
			cells[i] = strings.NewReplacer("\t", " ", "\n", `\n`).Replace(cells[i])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	line(append([]string(nil), cols...))
	sep := make([]string, len(cols))
	for i, c := range cols {
		sep[i] = strings.Repeat("-", max(len(c), 3))
	}
	line(sep)
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, v := range r {
			cells[i] = Format(v)
		}
		line(cells)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// WriteCSV writes cols and rows as CSV (RFC 4180), NULL as an empty field.
func WriteCSV(w io.Writer, cols []string, rows [][]any) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(cols); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	for _, r := range rows {
		rec := make([]string, len(r))
		for i, v := range r {
			if v != nil {
				rec[i] = Format(v)
			}
		}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("write csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}
