package generate

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // pure-Go SQLite driver, registered as "sqlite"

	"github.com/medgym/medgym/tasks"
)

// ehrNow is EHRSQL's fixed "current time": every relative time filter and
// every "current visit" is measured against it.
const ehrNow = "2105-12-31 23:59:00"

// ehrTimeLayout is the timestamp format of every EHRSQL time column.
const ehrTimeLayout = "2006-01-02 15:04:05"

// ehrNowTime is ehrNow parsed.
var ehrNowTime = mustParseEHRTime(ehrNow)

func mustParseEHRTime(s string) time.Time {
	t, err := time.Parse(ehrTimeLayout, s)
	if err != nil {
		panic(err)
	}
	return t
}

// parseEHRTime parses a demo CSV timestamp ("2164-10-23 21:09:00"); ok is
// false for an empty or malformed value.
func parseEHRTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(ehrTimeLayout, s)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// ehrTable is one table of a built EHR database: its DDL column names (in
// DDL order) and rows (one value per column; nil is NULL). Values are
// int64, float64 or string.
type ehrTable struct {
	name string
	cols []string
	rows [][]any
}

// ehrDDL is a parsed EHRSQL DDL file: its statements and each table's
// column names, in file order.
type ehrDDL struct {
	text   string
	tables []string            // DDL table names, in order
	cols   map[string][]string // lower-case table name → lower-case columns
}

var (
	ddlTableRe = regexp.MustCompile(`(?i)^CREATE TABLE\s+(\w+)`)
	ddlColRe   = regexp.MustCompile(`^\s+(\w+)\s+\w`)
)

// parseEHRDDL reads the CREATE TABLE statements of an EHRSQL schema file.
func parseEHRDDL(path string) (*ehrDDL, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	d := &ehrDDL{text: string(raw), cols: map[string][]string{}}
	cur := ""
	for _, line := range strings.Split(d.text, "\n") {
		if m := ddlTableRe.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			cur = strings.ToLower(m[1])
			d.tables = append(d.tables, m[1])
			continue
		}
		if cur == "" {
			continue
		}
		if m := ddlColRe.FindStringSubmatch(line); m != nil {
			c := strings.ToLower(m[1])
			if c == "foreign" || c == "primary" {
				continue
			}
			d.cols[cur] = append(d.cols[cur], c)
		}
	}
	if len(d.tables) == 0 {
		return nil, fmt.Errorf("schema %s: no CREATE TABLE", path)
	}
	return d, nil
}

// writeEHRDatabase creates path (replacing any old file) with the DDL and
// the tables' rows, then adds lookup indexes on the join columns idx names
// (table → columns). Same rows, same file bytes.
func writeEHRDatabase(ctx context.Context, path string, ddl *ehrDDL, tables []*ehrTable, idx map[string][]string) error {
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("write database: %w", err)
		}
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return fmt.Errorf("write database %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, ddl.text); err != nil {
		return fmt.Errorf("write database %s: schema: %w", path, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write database %s: %w", path, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for _, t := range tables {
		if want := ddl.cols[strings.ToLower(t.name)]; strings.Join(want, ",") != strings.Join(t.cols, ",") {
			return fmt.Errorf("write database %s: table %s columns %v, schema has %v", path, t.name, t.cols, want)
		}
		q := "INSERT INTO " + t.name + " VALUES (" + strings.TrimSuffix(strings.Repeat("?,", len(t.cols)), ",") + ")"
		st, err := tx.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("write database %s: %w", path, err)
		}
		for _, r := range t.rows {
			if _, err := st.ExecContext(ctx, r...); err != nil {
				_ = st.Close()
				return fmt.Errorf("write database %s: insert into %s: %w", path, t.name, err)
			}
		}
		if err := st.Close(); err != nil {
			return fmt.Errorf("write database %s: %w", path, err)
		}
	}
	for _, t := range tables {
		for _, c := range idx[strings.ToLower(t.name)] {
			q := fmt.Sprintf("CREATE INDEX idx_%s_%s ON %s(%s)", strings.ToLower(t.name), c, t.name, c)
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("write database %s: %w", path, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write database %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, "VACUUM"); err != nil {
		return fmt.Errorf("write database %s: vacuum: %w", path, err)
	}
	return db.Close()
}

// writeEHRCSV writes t as dir/<t.name>.csv with a lower-case header; NULL
// is an empty field and floats print as Python prints them.
func writeEHRCSV(dir string, t *ehrTable) error {
	path := filepath.Join(dir, t.name+".csv")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := csv.NewWriter(bw)
	if err := w.Write(t.cols); err != nil {
		_ = f.Close()
		return fmt.Errorf("write csv %s: %w", path, err)
	}
	rec := make([]string, len(t.cols))
	for _, r := range t.rows {
		for i, v := range r {
			rec[i] = ehrValueText(v)
		}
		if err := w.Write(rec); err != nil {
			_ = f.Close()
			return fmt.Errorf("write csv %s: %w", path, err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write csv %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write csv %s: %w", path, err)
	}
	return f.Close()
}

// ehrValueText renders a database value as Python's str() would (None is
// the empty string).
func ehrValueText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case float64:
		return pyFloat(x)
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		if x {
			return "1"
		}
		return "0"
	default:
		return fmt.Sprint(x)
	}
}

// pyFloat formats f like Python's repr(float): shortest round-trip digits,
// always a decimal point or exponent, exponent form outside [1e-4, 1e16).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	a := math.Abs(f)
	if a != 0 && (a < 1e-4 || a >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64) // 1e-05, 1.5e+16
		mant, exp, _ := strings.Cut(s, "e")
		sign := exp[0]
		exp = strings.TrimLeft(exp[1:], "0")
		if len(exp) < 2 {
			exp = strings.Repeat("0", 2-len(exp)) + exp
		}
		return mant + "e" + string(sign) + exp
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// csvRows streams the records of a gzip CSV file. fn gets a column lookup
// by lower-case header name ("" for an unknown column).
func csvRows(ctx context.Context, path string, fn func(get func(col string) string) error) error {
	_, err := tasks.ReadCSVGz(ctx, path, fn)
	return err
}

// lowerText is EHRSQL's text normalisation: lower-cased, trimmed; an empty
// field is NULL.
func lowerText(s string) any {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return nil
	}
	return s
}

// optInt parses an integer field (a trailing ".0" allowed); empty → NULL.
func optInt(s string) any {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) {
		return int64(f)
	}
	return nil
}

// optFloat parses a number field; empty or malformed → NULL.
func optFloat(s string) any {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// fmtTime formats t as an EHRSQL timestamp, or NULL when t is after now.
func fmtTime(t time.Time) any {
	if t.After(ehrNowTime) {
		return nil
	}
	return t.Format(ehrTimeLayout)
}
