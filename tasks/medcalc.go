package tasks

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas"
)

// MedCalcDataset is the dataset name of the MedCalc-Bench task set.
const MedCalcDataset = "medcalcbench"

// medCalcFile is the MedCalc-Bench CSV, relative to Source.DataRoot.
const medCalcFile = "medcalcbench/medcalc_bench_v1.0_test_dev.csv"

// medCalcInstruction is the dataset-level instruction, in upstream's spirit
// (MedAgentGym's MedCalcBench prompt), plus the answer formats we check.
const medCalcInstruction = "You are a medical calculation assistant. Read the patient note, identify the values " +
	"the question's calculator needs (convert units where needed), and write Python code that computes the " +
	"result. Store the final result in a variable named `answer` and print only the final answer. " +
	"Give dates as MM/DD/YYYY and a gestational age as a tuple (weeks, days)."

// medCalcActions are the actions a MedCalc-Bench agent may use.
var medCalcActions = []string{"validate_code", "debug", "terminal", "answer"}

// medCalcHeader is the CSV header the loader expects, in order.
var medCalcHeader = []string{"Row Number", "Calculator ID", "Calculator Name", "Category", "Output Type",
	"Note ID", "Note Type", "Patient Note", "Question", "Relevant Entities", "Ground Truth Answer",
	"Lower Limit", "Upper Limit", "Ground Truth Explanation"}

// Column indexes into medCalcHeader.
const (
	mcRow = iota
	mcCalcID
	mcCalcName
	_ // Category
	mcOutputType
	_ // Note ID
	_ // Note Type
	mcNote
	mcQuestion
	mcEntities
	mcAnswer
	mcLower
	mcUpper
	mcExplanation
)

//go:embed medcalc/calculators.py
var medCalcPython string

// medCalcFuncs maps a MedCalc-Bench calculator id to its reference function
// (a section of medcalc/calculators.py).
var medCalcFuncs = map[int]string{
	2: "creatinine_clearance", 3: "ckd_epi", 4: "cha2ds2_vasc", 5: "mean_arterial_pressure", 6: "bmi",
	7: "calcium_correction", 8: "wells_pe", 9: "mdrd", 10: "ideal_body_weight", 11: "qtc_bazett",
	13: "due_date", 15: "child_pugh", 16: "wells_dvt", 17: "rcri", 18: "heart_score", 19: "fib4",
	20: "centor", 21: "gcs", 22: "maintenance_fluids", 23: "meld_na", 24: "steroid_conversion",
	25: "has_bled", 26: "sodium_correction", 27: "glasgow_blatchford", 28: "apache_ii", 29: "psi",
	30: "serum_osmolality", 31: "homa_ir", 32: "charlson", 33: "feverpain", 36: "caprini",
	38: "free_water_deficit", 39: "anion_gap", 40: "fena", 43: "sofa", 44: "ldl", 45: "curb65",
	46: "framingham", 48: "perc", 49: "mme", 51: "sirs", 56: "qtc_fridericia", 57: "qtc_framingham",
	58: "qtc_hodges", 59: "qtc_rautaharju", 60: "body_surface_area", 61: "target_weight",
	62: "adjusted_body_weight", 63: "delta_gap", 64: "delta_ratio", 65: "albumin_corrected_anion_gap",
	66: "albumin_corrected_delta_gap", 67: "albumin_corrected_delta_ratio", 68: "conception_date",
	69: "gestational_age",
}

// medCalcIntegerIDs are the calculators whose answer is an integer score,
// checked as round(answer) == truth (MedCalc-Bench's evaluate.py; the CSV's
// Output Type "integer", less 69 whose answer is a (weeks, days) tuple).
// Upstream task files carry no Output Type, so their loader reads it here.
var medCalcIntegerIDs = map[int]bool{4: true, 15: true, 16: true, 17: true, 18: true, 20: true, 21: true,
	25: true, 27: true, 28: true, 29: true, 32: true, 33: true, 36: true, 43: true, 45: true, 48: true, 51: true}

// MedCalcErratum is one MedCalc-Bench v1.0 row whose label is wrong: a
// label of the medcalcbench@medgym-1 set, which corrects it.
type MedCalcErratum struct {
	Row          int
	CalculatorID int
	Calculator   string
	Inputs       string
	// Label is the v1.0 label; Correct is what medgym's reference prints.
	Label   string
	Correct string
	Reason  string
	Source  string
}

// MedCalcCorrected is the label set that corrects MedCalc-Bench v1.0's
// wrong labels, the strict verifier's default for medcalcbench.
const MedCalcCorrected = MedCalcDataset + "@medgym-1"

// MedCalcErrata returns the MedCalc-Bench v1.0 rows whose label
// MedCalcCorrected corrects.
func MedCalcErrata() ([]MedCalcErratum, error) {
	m, err := declaredLabelSets()
	if err != nil {
		return nil, err
	}
	ls := m[MedCalcCorrected]
	if ls == nil {
		return nil, fmt.Errorf("label set %s is not declared", MedCalcCorrected)
	}
	out := make([]MedCalcErratum, 0, len(ls.Labels))
	for _, l := range ls.Labels {
		out = append(out, MedCalcErratum{Row: l.RowNumber, CalculatorID: l.CalculatorID, Calculator: l.Calculator,
			Inputs: l.Inputs, Label: l.Was, Correct: l.Answer, Reason: l.Reason, Source: l.Source})
	}
	return out, nil
}

// loadMedCalc is the medcalcbench Loader. Split "test" is every row of the
// shared file, labelled as MedCalc-Bench v1.0 labels it (Load then applies
// the label sets); MedCalc-Bench publishes no training split of its own
// (MedAgentGym's train file is absent), so "train" is empty.
func loadMedCalc(ctx context.Context, src Source) ([]Task, error) {
	switch src.Split {
	case "test":
	case "train":
		return nil, nil
	default:
		return nil, fmt.Errorf("medcalcbench: unknown split %q (want test or train)", src.Split)
	}
	return readMedCalc(ctx, filepath.Join(src.DataRoot, medCalcFile))
}

func medCalcID(row int) string { return MedCalcDataset + "-" + strconv.Itoa(row) }

// readMedCalc parses every row of the MedCalc-Bench CSV at path into a test
// task, errata included.
func readMedCalc(ctx context.Context, path string) ([]Task, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("medcalcbench: %w", err)
	}
	sections, err := parsePySections(medCalcPython)
	if err != nil {
		return nil, fmt.Errorf("medcalcbench: calculators.py: %w", err)
	}
	r := csv.NewReader(bytes.NewReader(raw))
	r.FieldsPerRecord = len(medCalcHeader)
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("medcalcbench: %s: header: %w", path, err)
	}
	for i, h := range medCalcHeader {
		if strings.TrimPrefix(header[i], "\ufeff") != h {
			return nil, fmt.Errorf("medcalcbench: %s:1: column %d is %q, want %q", path, i+1, header[i], h)
		}
	}
	var out []Task
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("medcalcbench: %w", err)
		}
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("medcalcbench: %s:%d: %w", path, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("medcalcbench: %s: %w", path, err)
		}
		line, _ := r.FieldPos(0)
		t, err := medCalcTask(rec, sections)
		if err != nil {
			return nil, fmt.Errorf("medcalcbench: %s:%d: %w", path, line, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// medCalcProgram is the reference program of calculator fn on an entities
// dict literal: an input outside the calculator's vocabulary exits with
// status 1 and one line on stderr naming the calculator, parameter and
// value (UnknownValue), not a traceback.
func medCalcProgram(code, fn, entities string) string {
	return code + "\n\nentities = " + entities + "\ntry:\n    answer = " + fn + "(entities)\n" +
		"except UnknownValue as err:\n    sys.exit(\"medcalc: %s\" % err)\nprint(answer)\n"
}

// medCalcTask builds the task of one CSV record.
func medCalcTask(rec []string, sections pySections) (Task, error) {
	field := func(i int) string { return strings.TrimSpace(rec[i]) }
	row, err := strconv.Atoi(field(mcRow))
	if err != nil || row < 0 {
		return Task{}, fmt.Errorf("field %q: bad row number %q", medCalcHeader[mcRow], rec[mcRow])
	}
	id, err := strconv.Atoi(field(mcCalcID))
	if err != nil {
		return Task{}, fmt.Errorf("field %q: bad calculator id %q", medCalcHeader[mcCalcID], rec[mcCalcID])
	}
	fn, ok := medCalcFuncs[id]
	if !ok {
		return Task{}, fmt.Errorf("field %q: unknown calculator id %d", medCalcHeader[mcCalcID], id)
	}
	for _, i := range []int{mcCalcName, mcNote, mcQuestion, mcAnswer} {
		if field(i) == "" {
			return Task{}, fmt.Errorf("field %q: empty", medCalcHeader[i])
		}
	}
	entities := field(mcEntities)
	if !strings.HasPrefix(entities, "{") || !strings.HasSuffix(entities, "}") {
		return Task{}, fmt.Errorf("field %q: not a dict literal", medCalcHeader[mcEntities])
	}
	outType := field(mcOutputType)
	truth := Truth{Answer: field(mcAnswer), Extra: map[string]string{
		"calculator_id": strconv.Itoa(id), "output_type": outType,
	}}
	switch {
	case id == 13 || id == 68:
		truth.Type = schemas.AnswerDate
	case id == 69:
		truth.Type = schemas.AnswerTuple
	case outType == "integer":
		truth.Type = schemas.AnswerInteger
		if _, err := strconv.ParseFloat(truth.Answer, 64); err != nil {
			return Task{}, fmt.Errorf("field %q: not a number: %q", medCalcHeader[mcAnswer], truth.Answer)
		}
	case outType == "decimal":
		truth.Type = schemas.AnswerNumber
		lo, err := strconv.ParseFloat(field(mcLower), 64)
		if err != nil {
			return Task{}, fmt.Errorf("field %q: not a number: %q", medCalcHeader[mcLower], rec[mcLower])
		}
		hi, err := strconv.ParseFloat(field(mcUpper), 64)
		if err != nil {
			return Task{}, fmt.Errorf("field %q: not a number: %q", medCalcHeader[mcUpper], rec[mcUpper])
		}
		if lo > hi {
			return Task{}, fmt.Errorf("fields %q/%q: lower %v above upper %v", medCalcHeader[mcLower], medCalcHeader[mcUpper], lo, hi)
		}
		truth.Lower, truth.Upper = &lo, &hi
	default:
		return Task{}, fmt.Errorf("field %q: unknown output type %q", medCalcHeader[mcOutputType], outType)
	}
	code, err := sections.program(fn)
	if err != nil {
		return Task{}, fmt.Errorf("calculator %d: %w", id, err)
	}
	ref := medCalcProgram(code, fn, entities)
	return Task{
		View: schemas.TaskView{
			ID:               medCalcID(row),
			Dataset:          MedCalcDataset,
			Category:         field(mcCalcName),
			Split:            "test",
			Instruction:      medCalcInstruction,
			Question:         field(mcQuestion),
			Context:          rec[mcNote],
			AnswerType:       truth.Type,
			PermittedActions: append([]string(nil), medCalcActions...),
		},
		Truth:     truth,
		Reference: ref,
	}, nil
}
