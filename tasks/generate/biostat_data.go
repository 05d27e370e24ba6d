package generate

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// pandasNA are the cell texts pandas.read_csv reads as missing by default;
// the Go side treats them the same so both see the same rows.
var pandasNA = map[string]bool{
	"": true, "#N/A": true, "#N/A N/A": true, "#NA": true, "-1.#IND": true, "-1.#QNAN": true,
	"-NaN": true, "-nan": true, "1.#IND": true, "1.#QNAN": true, "<NA>": true, "N/A": true,
	"NA": true, "NULL": true, "NaN": true, "None": true, "n/a": true, "nan": true, "null": true,
}

// colKind is a column's type as pandas infers it.
type colKind int

const (
	kindNumber colKind = iota
	kindBool
	kindString
)

// bsColumn is one CSV column, typed as pandas would type it.
type bsColumn struct {
	Name    string
	Kind    colKind
	Missing []bool
	Num     []float64 // kindNumber; 1/0 for kindBool
	Str     []string  // the cell text
}

// bsTable is one CSV file of the biostat data.
type bsTable struct {
	File string
	N    int
	Cols []*bsColumn
	col  map[string]*bsColumn
}

// readBSTable reads a CSV and types its columns like pandas.read_csv.
func readBSTable(path, file string) (*bsTable, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("read %s: no data rows", file)
	}
	t := &bsTable{File: file, N: len(recs) - 1, col: map[string]*bsColumn{}}
	for j, name := range recs[0] {
		c := &bsColumn{Name: name, Missing: make([]bool, t.N), Num: make([]float64, t.N), Str: make([]string, t.N)}
		isNum, isBool, any := true, true, false
		for i, rec := range recs[1:] {
			s := rec[j]
			c.Str[i] = s
			if pandasNA[s] {
				c.Missing[i] = true
				c.Num[i] = math.NaN()
				continue
			}
			any = true
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				isNum = false
			}
			c.Num[i] = v
			switch s {
			case "True", "TRUE", "true":
				c.Num[i] = 1
			case "False", "FALSE", "false":
				c.Num[i] = 0
			default:
				isBool = false
			}
		}
		switch {
		case !any:
			continue // an all-missing column is of no use
		case isNum:
			c.Kind = kindNumber
		case isBool:
			c.Kind = kindBool
		default:
			c.Kind = kindString
		}
		t.Cols = append(t.Cols, c)
		t.col[name] = c
	}
	return t, nil
}

// level is one value of a grouping column.
type level struct {
	kind colKind
	num  float64
	str  string
}

// py is the level as a Python literal comparable with the pandas column.
func (l level) py() string {
	switch l.kind {
	case kindNumber:
		return strconv.FormatFloat(l.num, 'g', -1, 64)
	case kindBool:
		if l.num == 1 {
			return "True"
		}
		return "False"
	default:
		return pyString(l.str)
	}
}

// text is the level as the question shows it.
func (l level) text() string {
	switch l.kind {
	case kindNumber:
		return strconv.FormatFloat(l.num, 'g', -1, 64)
	case kindBool:
		if l.num == 1 {
			return "TRUE"
		}
		return "FALSE"
	default:
		return strconv.Quote(l.str)
	}
}

// is reports whether row i of c holds l.
func (c *bsColumn) is(i int, l level) bool {
	if c.Missing[i] {
		return false
	}
	if c.Kind == kindString {
		return c.Str[i] == l.str
	}
	return c.Num[i] == l.num
}

// levels returns the distinct non-missing values of c in sorted order with
// their counts.
func (c *bsColumn) levels() ([]level, []int) {
	count := map[level]int{}
	for i := range c.Missing {
		if c.Missing[i] {
			continue
		}
		l := level{kind: c.Kind}
		if c.Kind == kindString {
			l.str = c.Str[i]
		} else {
			l.num = c.Num[i]
		}
		count[l]++
	}
	ls := make([]level, 0, len(count))
	for l := range count {
		ls = append(ls, l)
	}
	sort.Slice(ls, func(a, b int) bool {
		if ls[a].kind == kindString {
			return ls[a].str < ls[b].str
		}
		return ls[a].num < ls[b].num
	})
	ns := make([]int, len(ls))
	for i, l := range ls {
		ns[i] = count[l]
	}
	return ls, ns
}

// complete returns the rows where none of cols is missing.
func (t *bsTable) complete(cols ...*bsColumn) []int {
	var rows []int
next:
	for i := range t.N {
		for _, c := range cols {
			if c.Missing[i] {
				continue next
			}
		}
		rows = append(rows, i)
	}
	return rows
}

// pyString is s as a Python string literal (JSON string syntax is valid
// Python).
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
