package verify

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// dataRoot finds the shared data: $MEDGYM_DATA, else ../shared/data next to
// the directory holding go.work, found by walking up from the test's
// directory.
func dataRoot(t *testing.T) string {
	t.Helper()
	d := tasks.DataRoot()
	if _, err := os.Stat(d); err != nil {
		t.Skipf("shared data not found (%v): set MEDGYM_DATA", err)
	}
	return d
}

// medcalcRow is one row of MedCalc-Bench's CSV.
type medcalcRow struct {
	row, calcID, outputType string
	answer                  string
	lower, upper            float64
}

func readMedcalc(t *testing.T) []medcalcRow {
	t.Helper()
	path := filepath.Join(dataRoot(t), "medcalcbench", "medcalc_bench_v1.0_test_dev.csv")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("shared data missing: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if err != nil {
		t.Fatalf("read header: %v", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	var rows []medcalcRow
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		row := medcalcRow{
			row:        rec[col["Row Number"]],
			calcID:     rec[col["Calculator ID"]],
			outputType: rec[col["Output Type"]],
			answer:     rec[col["Ground Truth Answer"]],
		}
		if row.outputType == "decimal" || row.outputType == "integer" && row.calcID != "69" {
			if row.lower, err = strconv.ParseFloat(rec[col["Lower Limit"]], 64); err != nil {
				t.Fatalf("row %s lower limit: %v", row.row, err)
			}
			if row.upper, err = strconv.ParseFloat(rec[col["Upper Limit"]], 64); err != nil {
				t.Fatalf("row %s upper limit: %v", row.row, err)
			}
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		t.Fatal("no MedCalc rows")
	}
	return rows
}

// truthOf builds a Truth the way MedCalc-Bench's evaluate.py checks a row.
func truthOf(r medcalcRow) tasks.Truth {
	switch {
	case r.calcID == "69":
		return tasks.Truth{Type: schemas.AnswerTuple, Answer: r.answer}
	case r.outputType == "date":
		return tasks.Truth{Type: schemas.AnswerDate, Answer: r.answer}
	case r.outputType == "integer":
		return tasks.Truth{Type: schemas.AnswerInteger, Answer: r.answer, Lower: &r.lower, Upper: &r.upper}
	default:
		return tasks.Truth{Type: schemas.AnswerNumber, Answer: r.answer, Lower: &r.lower, Upper: &r.upper}
	}
}

func stdout(s string) schemas.ExecResult {
	return schemas.ExecResult{Status: schemas.StatusOK, Stdout: s + "\n"}
}

// TestMedcalcRows checks every development row: the truth and values inside
// the CSV bounds pass strict, values outside fail; upstream accepts any
// number and never a date.
func TestMedcalcRows(t *testing.T) {
	t.Parallel()
	rows := readMedcalc(t)
	counts := map[string]int{}
	for _, r := range rows {
		truth := truthOf(r)
		counts[string(truth.Type)]++
		var pass, fail []string
		switch truth.Type {
		case schemas.AnswerNumber:
			mid := (r.lower + r.upper) / 2
			pass = []string{r.answer, fmtNum(r.lower), fmtNum(r.upper), fmtNum(mid), fmtNum(mid) + " units"}
			fail = []string{fmtNum(r.upper + 0.01*abs(r.upper) + 0.001), fmtNum(r.lower - 0.01*abs(r.lower) - 0.001)}
		case schemas.AnswerInteger:
			v, _ := strconv.ParseFloat(r.answer, 64)
			pass = []string{r.answer, fmtNum(v + 0.4), fmtNum(v - 0.4)}
			fail = []string{fmtNum(v + 1), fmtNum(v - 0.6)}
		case schemas.AnswerDate:
			d, err := time.Parse("01/02/2006", r.answer)
			if err != nil {
				t.Fatalf("row %s: date %q: %v", r.row, r.answer, err)
			}
			pass = []string{r.answer, d.Format("2006-01-02")}
			fail = []string{d.AddDate(0, 0, 1).Format("01/02/2006")}
		case schemas.AnswerTuple:
			wd, err := parseTuple(r.answer)
			if err != nil {
				t.Fatalf("row %s: %v", r.row, err)
			}
			pass = []string{r.answer, fmt.Sprintf("(%d, %d)", wd.weeks, wd.days), fmt.Sprintf("%d weeks, %d days", wd.weeks, wd.days)}
			fail = []string{fmt.Sprintf("(%d, %d)", wd.weeks, wd.days+1)}
		}
		for _, s := range pass {
			if c := checkOutput(Strict, "medcalcbench", truth, stdout(s)); !c.Accepted {
				t.Errorf("row %s (%s): strict rejects %q: %s", r.row, truth.Type, s, c.Verdict)
			}
		}
		for _, s := range fail {
			if c := checkOutput(Strict, "medcalcbench", truth, stdout(s)); c.Accepted {
				t.Errorf("row %s (%s): strict accepts %q: %s", r.row, truth.Type, s, c.Verdict)
			}
		}
		up := checkOutput(Upstream, "medcalcbench", truth, stdout(fail[0]))
		switch truth.Type {
		case schemas.AnswerNumber, schemas.AnswerInteger:
			if !up.Accepted {
				t.Errorf("row %s: upstream rejects the out-of-range %q: %s", r.row, fail[0], up.Verdict)
			}
		default:
			if up.Accepted {
				t.Errorf("row %s: upstream accepts a %s answer: %s", r.row, truth.Type, up.Verdict)
			}
		}
	}
	for _, ty := range []schemas.AnswerType{schemas.AnswerNumber, schemas.AnswerInteger, schemas.AnswerDate, schemas.AnswerTuple} {
		if counts[string(ty)] == 0 {
			t.Errorf("no MedCalc rows of type %s", ty)
		}
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
