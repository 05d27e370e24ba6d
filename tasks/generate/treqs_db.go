package generate

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/medgym/medgym/tasks"
)

// The TREQS (MIMICSQL) 5-table database, rebuilt from the MIMIC-III demo
// CSVs as the data root's mimicsql/PROVENANCE.md describes TREQS's own
// build: one DEMOGRAPHIC row per admission, DIAGNOSES/PROCEDURES joined with
// their dictionaries, PRESCRIPTIONS and LAB with the dose/value and unit
// concatenated. Values stay in MIMIC's case and dates; empty fields are NULL.

// treqsNumeric are DEMOGRAPHIC's non-TEXT columns (as pandas writes them).
var treqsNumeric = map[string]string{
	"AGE": "INTEGER", "DAYS_STAY": "INTEGER", "EXPIRE_FLAG": "INTEGER", "DOB_YEAR": "INTEGER",
	"ADMITYEAR": "INTEGER", "DOD_YEAR": "REAL",
}

// treqsIndexes are the lookup indexes of the built database.
var treqsIndexes = map[string][]string{
	"demographic":   {"HADM_ID", "SUBJECT_ID"},
	"diagnoses":     {"HADM_ID", "ICD9_CODE", "SHORT_TITLE"},
	"procedures":    {"HADM_ID", "ICD9_CODE", "SHORT_TITLE"},
	"prescriptions": {"HADM_ID", "DRUG", "FORMULARY_DRUG_CD"},
	"lab":           {"HADM_ID", "ITEMID", "LABEL"},
}

// treqsDDL is the schema as an ehrDDL (upper-case column names, which
// writeEHRDatabase and writeEHRCSV then keep).
func treqsDDL() *ehrDDL {
	d := &ehrDDL{cols: map[string][]string{}}
	var b strings.Builder
	for _, t := range tasks.TREQSSchema {
		d.tables = append(d.tables, t.Name)
		d.cols[strings.ToLower(t.Name)] = t.Cols
		fmt.Fprintf(&b, "CREATE TABLE %s (\n", t.Name)
		for i, c := range t.Cols {
			typ := "TEXT"
			if t.Name == "DEMOGRAPHIC" && treqsNumeric[c] != "" {
				typ = treqsNumeric[c]
			}
			sep := ","
			if i == len(t.Cols)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, "    %s %s%s\n", c, typ, sep)
		}
		b.WriteString(");\n")
	}
	d.text = b.String()
	return d
}

// nullable is a raw CSV field as a database value: "" is NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// yearOf is the year of a "YYYY-MM-DD ..." timestamp; ok is false when
// there is none.
func yearOf(s string) (int64, bool) {
	if len(s) < 4 {
		return 0, false
	}
	y, err := strconv.ParseInt(s[:4], 10, 64)
	return y, err == nil
}

// readID2Name reads id2name.csv.gz (no header: SUBJECT_ID,full name).
func readID2Name(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read names: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("read names %s: %w", path, err)
	}
	r := csv.NewReader(zr)
	r.FieldsPerRecord = 2
	out := map[string]string{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read names %s: %w", path, err)
		}
		out[strings.TrimSpace(rec[0])] = strings.TrimSpace(rec[1])
	}
}

// buildTREQS reads the demo CSVs (demoDir) and the synthetic names and
// returns the five tables in treqsSchema order.
func buildTREQS(ctx context.Context, demoDir, namesPath string) ([]*ehrTable, error) {
	names, err := readID2Name(namesPath)
	if err != nil {
		return nil, err
	}
	csvPath := func(n string) string { return filepath.Join(demoDir, n+".csv.gz") }
	tables := make([]*ehrTable, len(tasks.TREQSSchema))
	for i, s := range tasks.TREQSSchema {
		tables[i] = &ehrTable{name: s.Name, cols: s.Cols}
	}

	type patient struct{ dob, gender, dod, expire string }
	patients := map[string]patient{}
	if err := csvRows(ctx, csvPath("PATIENTS"), func(get func(string) string) error {
		patients[get("subject_id")] = patient{get("dob"), get("gender"), get("dod"), get("expire_flag")}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := csvRows(ctx, csvPath("ADMISSIONS"), func(get func(string) string) error {
		sid := get("subject_id")
		p, ok := patients[sid]
		if !ok {
			return fmt.Errorf("admission %s: no patient %s", get("hadm_id"), sid)
		}
		name, ok := names[sid]
		if !ok {
			return fmt.Errorf("no synthetic name for subject %s", sid)
		}
		admit, okA := parseEHRTime(get("admittime"))
		disch, okD := parseEHRTime(get("dischtime"))
		dobYear, okB := yearOf(p.dob)
		if !okA || !okD || !okB {
			return fmt.Errorf("admission %s: bad admittime/dischtime/dob", get("hadm_id"))
		}
		admitYear := int64(admit.Year())
		age := admitYear - dobYear
		if age > 89 { // MIMIC shifts patients older than 89 to about 300
			age = 89 + age - 300
		}
		days := int64(math.Floor(disch.Sub(admit).Hours() / 24))
		var dodYear any
		if y, ok := yearOf(p.dod); ok {
			dodYear = float64(y)
		}
		expire := optInt(p.expire)
		tables[0].rows = append(tables[0].rows, []any{
			sid, get("hadm_id"), name, nullable(get("marital_status")), age, nullable(p.dob), nullable(p.gender),
			nullable(get("language")), nullable(get("religion")), nullable(get("admission_type")), days,
			nullable(get("insurance")), nullable(get("ethnicity")), expire, nullable(get("admission_location")),
			nullable(get("discharge_location")), nullable(get("diagnosis")), nullable(p.dod), dobYear, dodYear,
			get("admittime"), get("dischtime"), admitYear,
		})
		return nil
	}); err != nil {
		return nil, err
	}

	for i, kind := range []string{"DIAGNOSES", "PROCEDURES"} {
		t := tables[1+i]
		dict := map[string][2]string{}
		if err := csvRows(ctx, csvPath("D_ICD_"+kind), func(get func(string) string) error {
			dict[get("icd9_code")] = [2]string{get("short_title"), get("long_title")}
			return nil
		}); err != nil {
			return nil, err
		}
		if err := csvRows(ctx, csvPath(kind+"_ICD"), func(get func(string) string) error {
			code := get("icd9_code")
			d, ok := dict[code]
			if !ok {
				return nil // inner join
			}
			t.rows = append(t.rows, []any{get("subject_id"), nullable(get("hadm_id")), code, nullable(d[0]), nullable(d[1])})
			return nil
		}); err != nil {
			return nil, err
		}
		sort.SliceStable(t.rows, func(a, b int) bool { return ehrValueText(t.rows[a][1]) < ehrValueText(t.rows[b][1]) })
	}

	if err := csvRows(ctx, csvPath("PRESCRIPTIONS"), func(get func(string) string) error {
		dose, unit := get("dose_val_rx"), get("dose_unit_rx")
		if dose == "" || unit == "" {
			return nil
		}
		tables[3].rows = append(tables[3].rows, []any{get("subject_id"), nullable(get("hadm_id")),
			nullable(get("icustay_id")), nullable(get("drug_type")), nullable(get("drug")),
			nullable(get("formulary_drug_cd")), nullable(get("route")), dose + unit})
		return nil
	}); err != nil {
		return nil, err
	}

	type labItem struct{ label, fluid, category string }
	items := map[string]labItem{}
	if err := csvRows(ctx, csvPath("D_LABITEMS"), func(get func(string) string) error {
		items[get("itemid")] = labItem{get("label"), get("fluid"), get("category")}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := csvRows(ctx, csvPath("LABEVENTS"), func(get func(string) string) error {
		hadm, value, unit := get("hadm_id"), get("value"), get("valueuom")
		if hadm == "" || value == "" || unit == "" {
			return nil
		}
		it, ok := items[get("itemid")]
		if !ok {
			return nil
		}
		tables[4].rows = append(tables[4].rows, []any{get("subject_id"), hadm, get("itemid"),
			nullable(get("charttime")), nullable(get("flag")), value + unit, nullable(it.label),
			nullable(it.fluid), nullable(it.category)})
		return nil
	}); err != nil {
		return nil, err
	}
	return tables, nil
}
