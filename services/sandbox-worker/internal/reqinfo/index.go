package reqinfo

import (
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Info types of the request_info action.
const (
	ColumnNames  = "column_names"
	ColumnValues = "column_values"
	Term         = "term"
)

// MaxDistinct bounds the distinct values kept per column; beyond it the
// column only answers exact and fuzzy term lookups over the kept values.
const MaxDistinct = 100_000

// Table is the index of one CSV table.
type Table struct {
	Name    string // file name, e.g. "patients.csv.gz"
	Columns []string
	// distinct[i] are the distinct non-empty values of column i, in first
	// appearance order (at most MaxDistinct).
	distinct [][]string
	// overflow[i] is true when column i had more than MaxDistinct values.
	overflow []bool
	// where maps a cell value to the columns it occurs in.
	where map[string][]int
}

// Distinct returns the distinct values of column col and whether the list
// is complete.
func (t *Table) Distinct(col string) ([]string, bool, bool) {
	for i, c := range t.Columns {
		if c == col {
			return t.distinct[i], !t.overflow[i], true
		}
	}
	return nil, false, false
}

// Dir is the index of every CSV table of one directory.
type Dir struct {
	Path   string
	Tables []*Table // sorted by name
}

// Index caches one Dir per directory. It is safe for concurrent use.
type Index struct {
	mu   sync.Mutex
	dirs map[string]*dirEntry
}

type dirEntry struct {
	once sync.Once
	dir  *Dir
	err  error
}

// NewIndex returns an empty cache.
func NewIndex() *Index { return &Index{dirs: map[string]*dirEntry{}} }

// Dir returns the index of directory path, building it on first use.
func (x *Index) Dir(path string) (*Dir, error) {
	x.mu.Lock()
	e, ok := x.dirs[path]
	if !ok {
		e = &dirEntry{}
		x.dirs[path] = e
	}
	x.mu.Unlock()
	e.once.Do(func() { e.dir, e.err = BuildDir(path) })
	return e.dir, e.err
}

// IsTable reports whether name is a CSV table (.csv or .csv.gz).
func IsTable(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, ".csv") || strings.HasSuffix(n, ".csv.gz")
}

// BuildDir indexes every CSV table directly inside path.
func BuildDir(path string) (*Dir, error) {
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	d := &Dir{Path: path}
	for _, e := range ents {
		if e.IsDir() || !IsTable(e.Name()) {
			continue
		}
		t, err := BuildTable(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, err
		}
		d.Tables = append(d.Tables, t)
	}
	sort.Slice(d.Tables, func(i, j int) bool { return d.Tables[i].Name < d.Tables[j].Name })
	return d, nil
}

// BuildTable indexes one CSV table (gzip when the name ends in .gz).
func BuildTable(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("index table: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(strings.ToLower(path), ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("index table %s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("index table %s: header: %w", path, err)
	}
	t := &Table{Name: filepath.Base(path), Columns: append([]string(nil), head...), where: map[string][]int{}}
	t.distinct = make([][]string, len(head))
	t.overflow = make([]bool, len(head))
	seen := make([]map[string]struct{}, len(head))
	for i := range seen {
		seen[i] = map[string]struct{}{}
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("index table %s: %w", path, err)
		}
		for i, v := range rec {
			if i >= len(head) || v == "" {
				continue
			}
			if _, ok := seen[i][v]; ok {
				continue
			}
			if len(seen[i]) >= MaxDistinct {
				t.overflow[i] = true
				continue
			}
			v = strings.Clone(v)
			seen[i][v] = struct{}{}
			t.distinct[i] = append(t.distinct[i], v)
			t.where[v] = append(t.where[v], i)
		}
	}
	return t, nil
}

// Answer produces upstream's env_message for one request_info call on a
// table (file) or directory at hostPath.
func (x *Index) Answer(hostPath, infoType, keyterm string) (string, error) {
	st, err := os.Stat(hostPath)
	if err != nil {
		return "", fmt.Errorf("request_info: %w", err)
	}
	dirPath, file := hostPath, ""
	if !st.IsDir() {
		dirPath, file = filepath.Dir(hostPath), filepath.Base(hostPath)
	}
	d, err := x.Dir(dirPath)
	if err != nil {
		return "", err
	}
	switch infoType {
	case ColumnNames, ColumnValues:
		if file == "" {
			return "", fmt.Errorf("request_info %s: data_path must be a table file, got a directory", infoType)
		}
		t := d.table(file)
		if t == nil {
			return "", fmt.Errorf("request_info %s: %s is not a CSV table", infoType, file)
		}
		if infoType == ColumnNames {
			return "The column names are: " + pyList(t.Columns, false), nil
		}
		vals, complete, ok := t.Distinct(keyterm)
		if !ok {
			return "", fmt.Errorf("request_info column_values: column %q not in %s (columns: %s)", keyterm, file, pyList(t.Columns, false))
		}
		if !complete || len(vals) > 10 {
			return "Too many values in the column, please specify a more detailed keyterm with info_type='term'. " +
				"It will return all the relevant information to one keyword in the entire database.", nil
		}
		return "The column values include: " + pyList(vals, true), nil
	case Term:
		if strings.TrimSpace(keyterm) == "" {
			return "", errors.New("request_info term: keyterm is empty")
		}
		res := make(map[string]string, len(d.Tables))
		for _, t := range d.Tables {
			res[t.Name] = t.term(keyterm)
		}
		b, err := json.Marshal(res)
		if err != nil {
			return "", fmt.Errorf("request_info term: %w", err)
		}
		return fmt.Sprintf("The requested information related to the keyterm %q is as follows: %s Maybe use the given information and write the code for next step.", keyterm, b), nil
	default:
		return "", fmt.Errorf("request_info: unknown info_type %q (want %s, %s or %s)", infoType, ColumnNames, ColumnValues, Term)
	}
}

func (d *Dir) table(name string) *Table {
	for _, t := range d.Tables {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// term answers the term lookup for one table.
func (t *Table) term(key string) string {
	if cols, ok := t.where[key]; ok {
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = t.Columns[c]
		}
		return fmt.Sprintf("The table contains the keyterm %q under the following columns %s.", key, pyList(names, false))
	}
	return fmt.Sprintf("The table does not contain the keyterm %s. The closest values are: %s", key, pyList(t.Closest(key, 5), false))
}

// Closest returns up to n distinct cell values whose Levenshtein distance to
// key, divided by the length of key, is below 0.5; closest first.
func (t *Table) Closest(key string, n int) []string {
	kr := []rune(key)
	kl := len(kr)
	if kl == 0 {
		return nil
	}
	type cand struct {
		v string
		d float64
	}
	var cands []cand
	seen := map[string]bool{}
	for _, vals := range t.distinct {
		for _, v := range vals {
			vl := utf8.RuneCountInString(v)
			if diff := vl - kl; float64(abs(diff))/float64(kl) >= 0.5 || seen[v] {
				continue
			}
			d := float64(levenshtein(kr, []rune(v))) / float64(kl)
			if d < 0.5 {
				seen[v] = true
				cands = append(cands, cand{v, d})
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].d < cands[j].d })
	if len(cands) > n {
		cands = cands[:n]
	}
	out := make([]string, len(cands))
	for i, c := range cands {
		out[i] = c.v
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func levenshtein(a, b []rune) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// pyList renders values like Python's repr of a list of strings; with
// numbers set, values that parse as numbers are left unquoted.
func pyList(vals []string, numbers bool) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		if numbers {
			if _, err := strconv.ParseFloat(v, 64); err == nil {
				b.WriteString(v)
				continue
			}
		}
		b.WriteString(pyQuote(v))
	}
	b.WriteByte(']')
	return b.String()
}

func pyQuote(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	r := strings.NewReplacer(`\`, `\\`, q, `\`+q, "\n", `\n`, "\t", `\t`)
	return q + r.Replace(s) + q
}
