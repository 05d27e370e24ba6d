package tasks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas"
)

// Upstream MedAgentGym task folders, read unchanged: for users who have the
// credentialed data and upstream's task files, <TasksDir>/<dataset>/ holds
// the files upstream's code reads (shared/notes/upstream.md §3.1), with
// their exact field names. Task ids are "<dataset>-<index>", the index of
// the task in its file (non-blank lines, from 0), as upstream's
// start_idx/end_idx and history_<index>.json count, followed by the row's
// own identity where the dataset has one ("medcalcbench-4-row1032": line
// index 4, MedCalc-Bench Row Number 1032; see upSpec.ident). MatchID finds a
// task by either form. Truth.Extra keeps upstream_file, upstream_line,
// upstream_index and upstream_id ("<field> <value>"). Upstream tasks carry
// no reference solution.

// ErrMissingField and ErrFieldType classify an upstream validation error.
var (
	ErrMissingField = errors.New("missing required field")
	ErrFieldType    = errors.New("wrong type")
)

// UpstreamError is a validation error of one line of an upstream task
// file: file:line, the field at fault (empty for a line that is not JSON)
// and why.
type UpstreamError struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *UpstreamError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: field %q: %v", e.File, e.Line, e.Field, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// upField is a field error before the file and line are known.
type upField struct {
	field string
	err   error
}

func (e *upField) Error() string { return fmt.Sprintf("field %q: %v", e.field, e.err) }

func missing(field string) error { return &upField{field, ErrMissingField} }

func wrongType(field, want string, raw json.RawMessage) error {
	s := string(raw)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return &upField{field, fmt.Errorf("%w: want %s, got %s", ErrFieldType, want, s)}
}

func badValue(field, msg string) error { return &upField{field, errors.New(msg)} }

// upRow is one parsed line of an upstream task file.
type upRow map[string]json.RawMessage

func (r upRow) has(f string) bool {
	v, ok := r[f]
	return ok && string(v) != "null"
}

// str returns a required string field.
func (r upRow) str(f string) (string, error) {
	v, ok := r[f]
	if !ok || string(v) == "null" {
		return "", missing(f)
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", wrongType(f, "a string", v)
	}
	return s, nil
}

// optStr returns an optional string field ("" when absent or null).
func (r upRow) optStr(f string) (string, error) {
	if !r.has(f) {
		return "", nil
	}
	return r.str(f)
}

// text returns a required string or number field as text.
func (r upRow) text(f string) (string, error) {
	v, ok := r[f]
	if !ok || string(v) == "null" {
		return "", missing(f)
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err == nil {
		return n.String(), nil
	}
	return "", wrongType(f, "a string or number", v)
}

// optText is text for an optional field.
func (r upRow) optText(f string) (string, error) {
	if !r.has(f) {
		return "", nil
	}
	return r.text(f)
}

// number returns a required numeric field.
func (r upRow) number(f string) (float64, string, error) {
	v, ok := r[f]
	if !ok || string(v) == "null" {
		return 0, "", missing(f)
	}
	var n json.Number
	if bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) || json.Unmarshal(v, &n) != nil {
		return 0, "", wrongType(f, "a number", v) // json.Number would take "64"
	}
	x, err := n.Float64()
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, "", wrongType(f, "a finite number", v)
	}
	return x, n.String(), nil
}

// boolean returns a required boolean field.
func (r upRow) boolean(f string) (bool, error) {
	v, ok := r[f]
	if !ok || string(v) == "null" {
		return false, missing(f)
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return false, wrongType(f, "a boolean", v)
	}
	return b, nil
}

// values returns a required answer field as text values: a list of
// scalars (strings, numbers, booleans), or one scalar.
func (r upRow) values(f string, listOnly bool) ([]string, error) {
	v, ok := r[f]
	if !ok || string(v) == "null" {
		return nil, missing(f)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(v, &list); err != nil {
		if listOnly {
			return nil, wrongType(f, "a list", v)
		}
		s, ok := scalarText(v)
		if !ok {
			return nil, wrongType(f, "a list or a scalar", v)
		}
		return []string{s}, nil
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := scalarText(e)
		if !ok {
			return nil, wrongType(fmt.Sprintf("%s[%d]", f, i), "a string, number or boolean", e)
		}
		out = append(out, s)
	}
	return out, nil
}

// scalarText writes a JSON scalar as Python's str() would (True/False for
// booleans, as upstream's gold strings do).
func scalarText(v json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, true
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		return n.String(), true
	}
	var b bool
	if json.Unmarshal(v, &b) == nil {
		if b {
			return "True", true
		}
		return "False", true
	}
	return "", false
}

// upSpec describes one upstream dataset.
type upSpec struct {
	train, test string // file names per split
	// ident is the field holding the row's own identity ("" when the
	// dataset has none) and prefix its label in the task id.
	ident, prefix string
	// build maps one row to a task (without id, dataset and split).
	build func(r upRow, c *upCtx) (Task, error)
}

// upCtx carries what a dataset's rows share.
type upCtx struct {
	dataset string
	dir     string // <TasksDir>/<dataset>
	extra   map[string]string
	// bioOutputs are BioCoder's reference outputs, read at the first row
	// (never nil after).
	bioOutputs map[string]BioCoderOutput
}

// upstreamSpecs lists the 12 MedAgentGym datasets and their files.
var upstreamSpecs = map[string]upSpec{
	"mimic_iii":     {train: "train_tasks.jsonl", test: "valid_tasks.jsonl", ident: "id", build: upEHRSQL},
	"eicu":          {train: "train_tasks.jsonl", test: "valid_tasks.jsonl", ident: "id", build: upEHRSQL},
	"treqs":         {train: "train_tasks.jsonl", test: "test_tasks.jsonl", ident: "id", build: upTREQS},
	"medcalcbench":  {train: "train_tasks_all.jsonl", test: "test_tasks.jsonl", ident: "Row Number", prefix: "row", build: upMedCalc},
	"medagentbench": {train: "train_tasks.jsonl", test: "test_tasks.jsonl", ident: "id", build: upMedAgentBench},
	"biocoder":      {train: "train_tasks.jsonl", test: "test_tasks.jsonl", ident: "idx", build: upBioCoder},
	"biodsbench":    {train: "train_tasks.jsonl", test: "test_tasks.jsonl", ident: "question_ids", prefix: "q", build: upBioDSBench},
	"ehrshot":       {train: "task.jsonl", test: "task.jsonl", ident: "task_id", build: upEHRSHOT},
	"ehr_seqsql":    {train: "train_tasks.jsonl", test: "test_tasks.jsonl", build: upSeqSQL},
	"ehrcon":        {train: "train_tasks.jsonl", test: "test_tasks.jsonl", build: upEHRCon},
	"npowerai":      {train: "train_tasks.jsonl", test: "test_tasks.jsonl", ident: "task_id", build: upNPowerAI},
	"mimic_extract": {train: "test_tasks.jsonl", test: "test_tasks.jsonl", ident: "task_name", build: upMIMICExtract},
}

// upIdentMax bounds the identity part of a task id (BioCoder's idx is a
// sha256).
const upIdentMax = 16

// upIdent is the id suffix of a row's own identity: the ident field's value
// with every character outside [A-Za-z0-9_] replaced by '_', at most
// upIdentMax long; "" when the dataset or the row has none.
func upIdent(sp upSpec, r upRow) (raw, suffix string) {
	if sp.ident == "" || !r.has(sp.ident) {
		return "", ""
	}
	v, ok := scalarText(r[sp.ident])
	if !ok || strings.TrimSpace(v) == "" {
		return "", ""
	}
	var b strings.Builder
	b.WriteString(sp.prefix)
	for _, c := range strings.TrimSpace(v) {
		if b.Len() >= len(sp.prefix)+upIdentMax {
			break
		}
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	return v, b.String()
}

// MatchID reports whether task id answers to want (schemas.MatchTaskID: the
// same id, or an upstream id asked for by its "<dataset>-<index>" part).
func MatchID(id, want string) bool { return schemas.MatchTaskID(id, want) }

// UpstreamPresent lists the upstream datasets that have a folder under
// dir, sorted.
func UpstreamPresent(dir string) ([]string, error) {
	var out []string
	for _, ds := range UpstreamDatasets() {
		fi, err := os.Stat(filepath.Join(dir, ds))
		switch {
		case err == nil && fi.IsDir():
			out = append(out, ds)
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("upstream tasks: %w", err)
		}
	}
	return out, nil
}

// UpstreamSplits splits splits into those whose file exists under dir for
// dataset and those whose file is missing.
func UpstreamSplits(dir, dataset string, splits []string) (present, missing []string, err error) {
	for _, sp := range splits {
		rel, err := UpstreamFile(dataset, sp)
		if err != nil {
			return nil, nil, err
		}
		switch _, err := os.Stat(filepath.Join(dir, rel)); {
		case err == nil:
			present = append(present, sp)
		case errors.Is(err, fs.ErrNotExist):
			missing = append(missing, sp)
		default:
			return nil, nil, fmt.Errorf("upstream tasks: %w", err)
		}
	}
	return present, missing, nil
}

// UpstreamDatasets lists the upstream dataset names LoadUpstream reads.
func UpstreamDatasets() []string { return slices.Sorted(maps.Keys(upstreamSpecs)) }

// UpstreamFile returns the file LoadUpstream reads for dataset and split,
// relative to TasksDir.
func UpstreamFile(dataset, split string) (string, error) {
	sp, ok := upstreamSpecs[dataset]
	if !ok {
		return "", fmt.Errorf("upstream tasks: %w %q (upstream: %v)", ErrUnknownDataset, dataset, UpstreamDatasets())
	}
	switch split {
	case "train":
		return filepath.Join(dataset, sp.train), nil
	case "test", "valid":
		return filepath.Join(dataset, sp.test), nil
	}
	return "", fmt.Errorf("upstream tasks %s: unknown split %q (train or test)", dataset, split)
}

// LoadUpstream reads an upstream MedAgentGym task folder: the file of
// src.Dataset and src.Split under src.TasksDir. Every line is validated; the
// first bad line fails the load with an *UpstreamError (file:line, field).
func LoadUpstream(ctx context.Context, src Source) ([]Task, error) {
	rel, err := UpstreamFile(src.Dataset, src.Split)
	if err != nil {
		return nil, err
	}
	sp := upstreamSpecs[src.Dataset]
	path := filepath.Join(src.TasksDir, rel)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("upstream tasks %s/%s: %s is missing (upstream reads %s for this split)", src.Dataset, src.Split, path, rel)
	}
	if err != nil {
		return nil, fmt.Errorf("upstream tasks: %w", err)
	}
	defer f.Close()
	c := &upCtx{dataset: src.Dataset, dir: filepath.Dir(path)}
	split := src.Split
	if split == "valid" {
		split = "test"
	}
	var out []Task
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for line := 1; sc.Scan(); line++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var row upRow
		if err := json.Unmarshal(b, &row); err != nil {
			return nil, &UpstreamError{File: path, Line: line, Err: fmt.Errorf("not a JSON object: %w", err)}
		}
		t, err := sp.build(row, c)
		if err != nil {
			var fe *upField
			if errors.As(err, &fe) {
				return nil, &UpstreamError{File: path, Line: line, Field: fe.field, Err: fe.err}
			}
			return nil, &UpstreamError{File: path, Line: line, Err: err}
		}
		t.View.ID = fmt.Sprintf("%s-%d", src.Dataset, len(out))
		raw, suffix := upIdent(sp, row)
		if suffix != "" {
			t.View.ID += "-" + suffix
		}
		if t.Truth.Extra == nil {
			t.Truth.Extra = map[string]string{}
		}
		t.Truth.Extra["upstream_file"] = rel
		t.Truth.LabelSet = UpstreamLabelSet(src.Dataset)
		t.Truth.Extra["upstream_line"] = strconv.Itoa(line)
		t.Truth.Extra["upstream_index"] = strconv.Itoa(len(out))
		if raw != "" {
			t.Truth.Extra["upstream_id"] = sp.ident + " " + raw
		}
		t.View.Dataset = src.Dataset
		t.View.Split = split
		t.View.AnswerType = t.Truth.Type
		if t.View.PermittedActions == nil {
			t.View.PermittedActions = append([]string(nil), medCalcActions...)
		}
		if t.View.Category == "" {
			t.View.Category = src.Dataset
		}
		if src.Dataset == "biocoder" {
			if c.bioOutputs == nil {
				outs, err := readBioCoderOutputs(src.TasksDir)
				if err != nil {
					return nil, err
				}
				c.bioOutputs = outs
			}
			if err := attachBioCoderOutput(&t, c.bioOutputs, rel, line); err != nil {
				return nil, &UpstreamError{File: path, Line: line, Err: err}
			}
		}
		if err := t.View.Validate(); err != nil {
			return nil, &UpstreamError{File: path, Line: line, Err: err}
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// goldTruth is the truth of an EHR gold list: the values as upstream's
// rule reads them (first value), typed by shape for the strict rules.
func goldTruth(vals []string) Truth {
	tr := Truth{Values: vals}
	switch {
	case len(vals) == 1:
		v := vals[0]
		tr.Answer = v
		switch {
		case regexp.MustCompile(`^-?[0-9]+$`).MatchString(v):
			tr.Type = schemas.AnswerInteger
		case isFloat(v):
			tr.Type, tr.Tolerance = schemas.AnswerNumber, EHRSQLTolerance
		case strings.EqualFold(v, "true") || strings.EqualFold(v, "false"):
			tr.Type, tr.Answer = schemas.AnswerBoolean, strings.ToLower(v)
		default:
			tr.Type = schemas.AnswerString
		}
	default:
		tr.Type, tr.Tolerance = schemas.AnswerList, EHRSQLTolerance
		b, _ := json.Marshal(vals)
		tr.Answer = string(b)
	}
	return tr
}

// atoiOr is the integer s holds (as text or a float with no fraction), or
// def.
func atoiOr(s string, def int) int {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f != math.Trunc(f) {
		return def
	}
	return int(f)
}

func isFloat(s string) bool {
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
}

// upEHRInstruction is the EHR SQL instruction (role, objective, tables,
// data location) for an upstream dataset.
func upEHRInstruction(dataset string, tables []string, extra string) string {
	var b strings.Builder
	b.WriteString("You are a biomedical expert in handling EHR data and answer questions accordingly. ")
	b.WriteString("Your objective is to solve a coding problem with given EHR data, with the goal of finally giving a concrete answer to the question.\n")
	b.WriteString("Assume you have knowledge of several tables:\n")
	b.WriteString("Tables are linked by identifiers which usually have the suffix 'ID' (e.g. a patient id and a " +
		"hospital admission id). Event tables record diagnoses, procedures, prescriptions, lab tests and other events; " +
		"dictionary tables map codes and item ids to names.\n")
	for i, t := range tables {
		fmt.Fprintf(&b, "(%d) %s\n", i+1, t)
	}
	fmt.Fprintf(&b, "All the tables are saved in the data directory /data/%s.%s\n", dataset, extra)
	b.WriteString("Write a python code to solve the given question. Use the variable 'answer' to store the answer of the code, and print it.")
	return b.String()
}

var (
	upMIMICTables = []string{"ADMISSIONS", "CHARTEVENTS", "COST", "D_ICD_DIAGNOSES", "D_ICD_PROCEDURES", "D_ITEMS",
		"D_LABITEMS", "DIAGNOSES_ICD", "ICUSTAYS", "INPUTEVENTS_CV", "LABEVENTS", "MICROBIOLOGYEVENTS", "OUTPUTEVENTS",
		"PATIENTS", "PRESCRIPTIONS", "PROCEDURES", "TRANSFERS"}
	upEICUTables = []string{"allergy", "cost", "diagnosis", "intakeoutput", "lab", "medication", "microlab", "patient",
		"treatment", "vitalperiod"}
)

// upEHRSQL maps an EHRSQL row (mimic_iii, eicu): question = template,
// gold = answer.
func upEHRSQL(r upRow, c *upCtx) (Task, error) {
	q, err := r.str("template")
	if err != nil {
		return Task{}, err
	}
	vals, err := r.values("answer", true)
	if err != nil {
		return Task{}, err
	}
	tag, err := r.optStr("q_tag")
	if err != nil {
		return Task{}, err
	}
	query, err := r.optStr("query")
	if err != nil {
		return Task{}, err
	}
	tables := upMIMICTables
	if c.dataset == "eicu" {
		tables = upEICUTables
	}
	tr := goldTruth(vals)
	tr.Extra = map[string]string{"sql": query}
	return Task{
		View: schemas.TaskView{
			Category: tag, Question: q, Instruction: upEHRInstruction(c.dataset, tables, ""),
			Resources: []string{c.dataset}, PermittedActions: append([]string(nil), EHRSQLActions...),
		},
		Truth: tr,
	}, nil
}

// upTREQS maps a TREQS row: question, answer (1 or 2 values).
func upTREQS(r upRow, c *upCtx) (Task, error) {
	q, err := r.str("question")
	if err != nil {
		return Task{}, err
	}
	vals, err := r.values("answer", true)
	if err != nil {
		return Task{}, err
	}
	query, err := r.optStr("query")
	if err != nil {
		return Task{}, err
	}
	tables := make([]string, len(TREQSSchema))
	for i, t := range TREQSSchema {
		tables[i] = t.Name + ": " + strings.Join(t.Cols, ", ")
	}
	tr := goldTruth(vals)
	tr.Extra = map[string]string{"sql": query}
	return Task{
		View: schemas.TaskView{
			Category: upSQLAgg(query), Question: q, Instruction: upEHRInstruction(c.dataset, tables, ""),
			Resources: []string{c.dataset}, PermittedActions: append([]string(nil), EHRSQLActions...),
		},
		Truth: tr,
	}, nil
}

var upAggRe = regexp.MustCompile(`(?i)^\s*SELECT\s+(COUNT|MAX|MIN|AVG|SUM)\s*\(`)

// upSQLAgg is a category from a gold query: its aggregate, or "select".
func upSQLAgg(q string) string {
	if q == "" {
		return ""
	}
	if m := upAggRe.FindStringSubmatch(q); m != nil {
		return strings.ToLower(m[1])
	}
	return "select"
}

var (
	upDateRe  = regexp.MustCompile(`^\d{1,2}/\d{1,2}/\d{4}$`)
	upTupleRe = regexp.MustCompile(`^\(.*,.*\)$`)
)

// upMedCalc maps a MedCalc-Bench row (fields with spaces).
func upMedCalc(r upRow, _ *upCtx) (Task, error) {
	q, err := r.str("Question")
	if err != nil {
		return Task{}, err
	}
	name, err := r.str("Calculator Name")
	if err != nil {
		return Task{}, err
	}
	note, err := r.str("Patient Note")
	if err != nil {
		return Task{}, err
	}
	ans, err := r.text("Ground Truth Answer")
	if err != nil {
		return Task{}, err
	}
	lo, err := r.optText("Lower Limit")
	if err != nil {
		return Task{}, err
	}
	hi, err := r.optText("Upper Limit")
	if err != nil {
		return Task{}, err
	}
	calc, err := r.optText("Calculator ID")
	if err != nil {
		return Task{}, err
	}
	ans = strings.TrimSpace(ans)
	tr := Truth{Answer: ans, Extra: map[string]string{"calculator_id": calc}}
	switch {
	case upDateRe.MatchString(ans):
		tr.Type = schemas.AnswerDate
	case upTupleRe.MatchString(ans):
		tr.Type = schemas.AnswerTuple
	case isFloat(ans) && medCalcIntegerIDs[atoiOr(calc, -1)]:
		// As the built-in tasks: round(answer) == truth, not [x, x] limits.
		tr.Type = schemas.AnswerInteger
	case isFloat(ans):
		tr.Type = schemas.AnswerNumber
		l, errL := strconv.ParseFloat(strings.TrimSpace(lo), 64)
		h, errH := strconv.ParseFloat(strings.TrimSpace(hi), 64)
		switch {
		case errL == nil && errH == nil && l <= h:
			tr.Lower, tr.Upper = &l, &h
		case lo != "" || hi != "":
			return Task{}, badValue("Lower Limit", fmt.Sprintf("limits %q/%q are not an ordered pair of numbers", lo, hi))
		default:
			tr.Tolerance = 0.05
		}
	default:
		return Task{}, badValue("Ground Truth Answer", fmt.Sprintf("%q is not a number, date or (weeks, days) tuple", ans))
	}
	return Task{
		View: schemas.TaskView{
			Category: name, Question: q, Context: note, Instruction: medCalcInstruction,
			PermittedActions: append([]string(nil), medCalcActions...),
		},
		Truth: tr,
	}, nil
}

// upMedAgentBenchInstruction is the FHIR-agent instruction; funcs is the
// text of funcs_v1.json when the folder has it.
func upMedAgentBenchInstruction(funcs string) string {
	var b strings.Builder
	b.WriteString("You are an expert in using FHIR functions to assist medical professionals. You are given a question " +
		"and a set of possible functions. Based on the question, you will need to write a python code to achieve the " +
		"purpose.\n")
	if funcs != "" {
		b.WriteString("The available FHIR functions (endpoints) are:\n" + funcs + "\n")
	}
	b.WriteString("1. Write a python script to invoke GET functions using the `requests` library, and print the results.\n" +
		"2. To invoke a POST function, do not actually send it: record the URL and the JSON payload.\n" +
		"3. Store the final result in a variable named `answer` with the structure " +
		"{\"GET\": [...], \"POST\": [url, payload]} and print it.\n" +
		"The FHIR server base URL is http://localhost:8080/fhir/.")
	return b.String()
}

// upMedAgentBench maps a MedAgentBench row: id "task<k>_<n>", instruction,
// context, sol, eval_MRN.
func upMedAgentBench(r upRow, c *upCtx) (Task, error) {
	id, err := r.str("id")
	if err != nil {
		return Task{}, err
	}
	cat, _, ok := strings.Cut(id, "_")
	if !ok || !strings.HasPrefix(cat, "task") {
		return Task{}, badValue("id", fmt.Sprintf("%q is not task<k>_<n>", id))
	}
	instr, err := r.str("instruction")
	if err != nil {
		return Task{}, err
	}
	ctxText, err := r.optStr("context")
	if err != nil {
		return Task{}, err
	}
	mrn, err := r.optStr("eval_MRN")
	if err != nil {
		return Task{}, err
	}
	tr := Truth{Extra: map[string]string{"task_id": id, "eval_MRN": mrn}}
	if r.has("sol") {
		vals, err := r.values("sol", true)
		if err != nil {
			return Task{}, err
		}
		tr.Type, tr.Values = schemas.AnswerList, vals
		b, _ := json.Marshal(vals)
		tr.Answer = string(b)
	}
	if c.extra == nil {
		c.extra = map[string]string{}
		if b, err := os.ReadFile(filepath.Join(c.dir, "funcs_v1.json")); err == nil {
			c.extra["funcs"] = strings.TrimSpace(string(b))
		}
	}
	q := instr
	if ctxText != "" {
		q += "\nContext: " + ctxText
	}
	return Task{
		View: schemas.TaskView{
			Category: cat, Question: q, Instruction: upMedAgentBenchInstruction(c.extra["funcs"]),
			PermittedActions: append([]string(nil), medCalcActions...),
		},
		Truth: tr,
	}, nil
}

// upBioCoder maps a BioCoder row. Upstream's ground truth is the output of
// running `code` at setup; it is not computed here (Truth.Answer is empty,
// Extra["code"] holds the program).
func upBioCoder(r upRow, _ *upCtx) (Task, error) {
	problem, err := r.str("problem")
	if err != nil {
		return Task{}, err
	}
	sig, err := r.str("signature")
	if err != nil {
		return Task{}, err
	}
	ctxCode, err := r.str("context")
	if err != nil {
		return Task{}, err
	}
	if !strings.Contains(ctxCode, "<<insert solution here>>") {
		return Task{}, badValue("context", "no <<insert solution here>> marker")
	}
	idx, err := r.optText("idx")
	if err != nil {
		return Task{}, err
	}
	code, err := r.optStr("code")
	if err != nil {
		return Task{}, err
	}
	solution, err := r.optStr("solution")
	if err != nil {
		return Task{}, err
	}
	instr := "You are a bioinformatics expert. Write a python function that solves the problem below. Only write the " +
		"function (with the imports it needs); it will be inserted into a larger program. The function must have " +
		"this signature:\n" + sig
	// Graded by output (schemas.AnswerOutput): the agent's function runs
	// inside the context (View.Harness), its stdout against the reference
	// solution's, run the same way (BioCoderOutputs; attachBioCoderOutput).
	return Task{
		View: schemas.TaskView{Question: problem, Instruction: instr, Harness: ctxCode,
			PermittedActions: []string{"validate_code", "debug", "terminal"}},
		Truth: Truth{Type: schemas.AnswerOutput, Extra: map[string]string{"idx": idx, "context": ctxCode, "code": code,
			"solution": solution}},
	}, nil
}

// BioCoderOutputsFile is where `medgym tasks reference-outputs` writes the
// output of every BioCoder reference solution, relative to TasksDir.
const BioCoderOutputsFile = "biocoder/medgym_reference_outputs.jsonl"

// BioCoderOutput is one line of BioCoderOutputsFile: the run of one task's
// reference solution spliced into its context, in the sandbox, as an
// agent's function is run. File and Line name the task (as Truth.Extra's
// upstream_file and upstream_line), Idx guards against a changed task file.
type BioCoderOutput struct {
	File     string `json:"file"`
	Line     int    `json:"line"`
	Idx      string `json:"idx"`
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	// Message is the run's observation text (upstream's env_message: stdout
	// then stderr), the ground truth of upstream's rule.
	Message string `json:"message"`
}

// Truth.Extra["reference_output"] says whether a BioCoder task has its
// reference output: "ok", "missing" (no outputs file or no line for the
// task) or "failed" (the reference did not exit cleanly).

// readBioCoderOutputs reads BioCoderOutputsFile under dir, keyed by
// file:line; a missing file is an empty map.
func readBioCoderOutputs(dir string) (map[string]BioCoderOutput, error) {
	path := filepath.Join(dir, BioCoderOutputsFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]BioCoderOutput{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("upstream tasks: %w", err)
	}
	out := map[string]BioCoderOutput{}
	for i, line := range bytes.Split(raw, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var o BioCoderOutput
		if err := json.Unmarshal(line, &o); err != nil {
			return nil, &UpstreamError{File: path, Line: i + 1, Err: fmt.Errorf("not a reference output: %w", err)}
		}
		out[o.File+":"+strconv.Itoa(o.Line)] = o
	}
	return out, nil
}

// attachBioCoderOutput sets t's truth from its reference run: Answer is the
// reference's stdout, Extra["reference_message"] its env_message.
func attachBioCoderOutput(t *Task, outs map[string]BioCoderOutput, rel string, line int) error {
	o, ok := outs[rel+":"+strconv.Itoa(line)]
	switch {
	case !ok:
		t.Truth.Extra["reference_output"] = "missing"
		return nil
	case o.Idx != t.Truth.Extra["idx"]:
		return fmt.Errorf("%s has the output of idx %q for this line, the task is idx %q: the task file changed, "+
			"run medgym tasks reference-outputs again", BioCoderOutputsFile, o.Idx, t.Truth.Extra["idx"])
	case o.Status != schemas.StatusOK || o.ExitCode != 0:
		t.Truth.Extra["reference_output"] = "failed"
	default:
		t.Truth.Extra["reference_output"] = "ok"
	}
	t.Truth.Answer = o.Stdout
	t.Truth.Extra["reference_message"] = o.Message
	return nil
}

// upBioDSBench maps a BioDSBench row: question = queries + cot_instructions.
func upBioDSBench(r upRow, c *upCtx) (Task, error) {
	q, err := r.str("queries")
	if err != nil {
		return Task{}, err
	}
	cot, err := r.str("cot_instructions")
	if err != nil {
		return Task{}, err
	}
	extra := map[string]string{}
	for _, f := range []string{"test_cases", "study_ids", "question_ids", "code_histories", "reference_answer"} {
		v, err := r.optText(f)
		if err != nil {
			return Task{}, err
		}
		extra[f] = v
	}
	instr := "You are a biomedical data scientist. Write python code to answer the question; all required data are " +
		"stored in /data/" + c.dataset + ". Store the result in a variable named `answer` and print it."
	return Task{
		View: schemas.TaskView{Category: extra["study_ids"], Question: q + "\n" + cot, Instruction: instr,
			Resources: []string{c.dataset}, PermittedActions: append([]string(nil), medCalcActions...)},
		Truth: Truth{Type: schemas.AnswerString, Answer: extra["reference_answer"], Extra: extra},
	}, nil
}

// upMLInstruction is the ML-engineer instruction of EHRSHOT and
// MIMIC-Extract.
func upMLInstruction(dataset, task string) string {
	return "You are a machine learning engineer working with EHR data. You must use machine learning or deep " +
		"learning methods to solve the task; a GPU is available. Read the features and labels from /data/" + dataset +
		" (do not modify them), train a model, and write the label predictions for the test patients to " +
		"predictions-" + task + ".csv. Do not plot; print progress."
}

// upEHRSHOT maps an EHRSHOT row (task.jsonl, both splits).
func upEHRSHOT(r upRow, c *upCtx) (Task, error) {
	if _, err := r.text("task_id"); err != nil {
		return Task{}, err
	}
	name, err := r.str("task_name")
	if err != nil {
		return Task{}, err
	}
	desc, err := r.str("task_description")
	if err != nil {
		return Task{}, err
	}
	return Task{
		View: schemas.TaskView{Category: name, Question: desc, Instruction: upMLInstruction(c.dataset, name),
			Resources: []string{c.dataset}, PermittedActions: append([]string(nil), medCalcActions...)},
		Truth: Truth{Extra: map[string]string{"task_name": name}},
	}, nil
}

// upSeqSQL maps an EHR-SeqSQL row: question = seed_question + question,
// gold = ans. The schema is MIMIC-III's, so the data is mimic_iii's.
func upSeqSQL(r upRow, _ *upCtx) (Task, error) {
	q, err := r.str("question")
	if err != nil {
		return Task{}, err
	}
	seed, err := r.optStr("seed_question")
	if err != nil {
		return Task{}, err
	}
	vals, err := r.values("ans", false)
	if err != nil {
		return Task{}, err
	}
	if seed != "" {
		q = seed + " " + q
	}
	tr := goldTruth(vals)
	return Task{
		View: schemas.TaskView{Question: q, Instruction: upEHRInstruction("mimic_iii", upMIMICTables, ""),
			Resources: []string{"mimic_iii"}, PermittedActions: append([]string(nil), EHRSQLActions...)},
		Truth: tr,
	}, nil
}

// upEHRCon maps an EHRCon row; the question is templated from the
// admission id and the medical entity.
func upEHRCon(r upRow, c *upCtx) (Task, error) {
	adm, err := r.text("Hospital admission")
	if err != nil {
		return Task{}, err
	}
	entity, err := r.str("Medical entity")
	if err != nil {
		return Task{}, err
	}
	hasErr, err := r.boolean("Has error")
	if err != nil {
		return Task{}, err
	}
	n := ""
	if r.has("Number of inconsistencies") {
		x, s, err := r.number("Number of inconsistencies")
		if err != nil {
			return Task{}, err
		}
		if x != math.Trunc(x) {
			return Task{}, wrongType("Number of inconsistencies", "an integer", json.RawMessage(s))
		}
		n = s
	}
	q := fmt.Sprintf("For a given admission id %s and medical entity %s, identify if there is any inconsistency "+
		"between the clinical notes and the database. Return the answer as a boolean value (True if there is an "+
		"inconsistency, False otherwise).", adm, entity)
	extra := " The database is the SQLite file /data/" + c.dataset + "/EHRCon_combined.db and the clinical notes are in " +
		"/data/" + c.dataset + "/clinical_notes.csv."
	return Task{
		// Upstream's EHRCon task is the one that advertises all four actions.
		View: schemas.TaskView{Question: q, Instruction: upEHRInstruction(c.dataset, upMIMICTables, extra),
			Resources: []string{c.dataset}, PermittedActions: []string{"request_info", "validate_code", "debug", "terminal", "answer"}},
		Truth: Truth{Type: schemas.AnswerBoolean, Answer: strconv.FormatBool(hasErr),
			Extra: map[string]string{"n_inconsistencies": n, "admission": adm, "entity": entity}},
	}, nil
}

const upNPowerInstruction = "You are a scientist who faces sample-size and statistical-power problems when " +
	"designing studies. Write python code that solves the statistics question, store the result in a variable " +
	"named `answer`, and print only the final number (an integer sample size, or a power between 0 and 1)."

// upNPowerAI maps an N-PowerAI row.
func upNPowerAI(r upRow, _ *upCtx) (Task, error) {
	typ, err := r.str("task_type")
	if err != nil {
		return Task{}, err
	}
	target, err := r.str("estimate_target")
	if err != nil {
		return Task{}, err
	}
	q, err := r.str("question")
	if err != nil {
		return Task{}, err
	}
	x, s, err := r.number("answer")
	if err != nil {
		return Task{}, err
	}
	id, err := r.optText("task_id")
	if err != nil {
		return Task{}, err
	}
	tr := Truth{Extra: map[string]string{"estimate_target": target, "task_type": typ, "task_id": id}}
	switch target {
	case "size":
		if x != math.Trunc(x) {
			return Task{}, wrongType("answer", "an integer for estimate_target size", json.RawMessage(s))
		}
		tr.Type, tr.Answer = schemas.AnswerInteger, strconv.FormatInt(int64(x), 10)
	case "power":
		tr.Type, tr.Answer, tr.Tolerance = schemas.AnswerNumber, s, 0.01
	default:
		return Task{}, badValue("estimate_target", fmt.Sprintf("%q is neither \"size\" nor \"power\"", target))
	}
	return Task{
		View: schemas.TaskView{Category: typ + "_" + target, Question: q, Instruction: upNPowerInstruction,
			PermittedActions: append([]string(nil), medCalcActions...)},
		Truth: tr,
	}, nil
}

// upMIMICExtract maps a MIMIC-Extract row (test_tasks.jsonl, both modes).
func upMIMICExtract(r upRow, c *upCtx) (Task, error) {
	name, err := r.str("task_name")
	if err != nil {
		return Task{}, err
	}
	desc, err := r.str("task_description")
	if err != nil {
		return Task{}, err
	}
	extra := map[string]string{"task_name": name}
	for _, f := range []string{"task_category", "feature_label_directory", "model"} {
		v, err := r.optStr(f)
		if err != nil {
			return Task{}, err
		}
		extra[f] = v
	}
	if r.has("performance") {
		var perf map[string]float64
		if err := json.Unmarshal(r["performance"], &perf); err != nil {
			return Task{}, wrongType("performance", "an object of numbers", r["performance"])
		}
		keys := make([]string, 0, len(perf))
		for k := range perf {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+"="+strconv.FormatFloat(perf[k], 'g', -1, 64))
		}
		extra["performance"] = strings.Join(parts, ",")
	}
	return Task{
		View: schemas.TaskView{Category: name, Question: desc, Instruction: upMLInstruction(c.dataset, name),
			Resources: []string{c.dataset}, PermittedActions: append([]string(nil), medCalcActions...)},
		Truth: Truth{Extra: extra},
	}, nil
}
