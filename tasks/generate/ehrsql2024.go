package generate

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

// EHRSQL 2024 (Lee et al., arXiv:2405.06673): reliable text-to-SQL over the
// MIMIC-IV demo, with unanswerable questions. Generation rebuilds the
// authors' database from the demo CSVs (ehrsql2024_db.go), runs each
// answerable question's gold SQL on it for the answer, and turns each
// unanswerable one (label "null") into a task whose correct outcome is an
// abstention. Upstream's train split is our train, its valid split our test.

//go:embed ehrsql2024/LICENSE.md
var ehrsql2024License string

const (
	ehrsql24Seed    = 20240506 // fixed seed of the synthetic cost prices
	ehrsql24DataDir = "ehrsql2024"
	ehrsql24DemoDir = "mimic-iv-demo"
)

// ehrsql24Splits maps upstream's splits to ours.
var ehrsql24Splits = []struct{ upstream, ours string }{{"train", "train"}, {"valid", "test"}}

// ehrsql24Reconstructed are tables this build reconstructs from another
// source (see ehrsql2024_db.go, step 9): tasks whose gold SQL reads them
// say so in Truth.Extra["reconstructed"].
var ehrsql24Reconstructed = []string{"chartevents"}

// ehrsql24Question is one upstream question with its label and answer.
type ehrsql24Question struct {
	ID, Question, SQL string
	Answer            string // the authors' answer ("null" when unanswerable)
}

// EHRSQL2024Stats reports what one generation kept and how the rebuilt
// database agrees with the authors' answers.
type EHRSQL2024Stats struct {
	Split        string
	Questions    int
	Unanswerable int
	Kept         int // tasks written (answerable kept + unanswerable)
	// Reconstructed counts the kept tasks that read a reconstructed table.
	Reconstructed int
	// Left-out answerable questions, by reason.
	Empty, NullValue, TooMany, SQLError int
	// Agreement with the authors' answers over the kept answerable tasks
	// (rows sorted, floats to 3 decimals as answer.json writes them):
	// Agree of Compared for questions that do not read the synthetic cost
	// table (shift-invariant: they should all agree), CostAgree of
	// CostCompared for those that do (random prices: they should not),
	// ChartAgree of ChartCompared for those that read the reconstructed
	// chartevents (and not cost).
	Agree, Compared, CostAgree, CostCompared, ChartAgree, ChartCompared int
}

// generateEHRSQL2024 is the ehrsql2024 Generator.
func generateEHRSQL2024(ctx context.Context, dataRoot, dir string) error {
	_, err := GenerateEHRSQL2024(ctx, dataRoot, dir)
	return err
}

// GenerateEHRSQL2024 generates the dataset into dir and returns per-split
// statistics (also logged).
func GenerateEHRSQL2024(ctx context.Context, dataRoot, dir string) ([]EHRSQL2024Stats, error) {
	src := filepath.Join(dataRoot, ehrsql24DataDir)
	ddl, err := parseEHRDDL(filepath.Join(src, "mimic_iv.sql"))
	if err != nil {
		return nil, err
	}
	splits := map[string][]ehrsql24Question{}
	named := map[string]bool{}
	for _, sp := range ehrsql24Splits {
		qs, err := readEHRSQL24Split(filepath.Join(src, sp.upstream))
		if err != nil {
			return nil, err
		}
		splits[sp.upstream] = qs
		for _, q := range qs {
			for _, id := range mimicIVSubjectRe.FindAllString(q.Question+" "+q.SQL, -1) {
				named[id] = true
			}
		}
	}
	rng := rand.New(rand.NewPCG(ehrsql24Seed, 4))
	b, err := buildEHRSQL2024(ctx, filepath.Join(dataRoot, ehrsql24DemoDir), filepath.Join(dataRoot, ehrsql24MEDS), ddl, named, rng)
	if err != nil {
		return nil, fmt.Errorf("build database: %w", err)
	}
	dbPath := filepath.Join(dir, tasks.EHRSQL2024Dataset+".db")
	tables := b.ordered()
	if err := writeEHRDatabase(ctx, dbPath, ddl, tables, ehrsql24Indexes); err != nil {
		return nil, err
	}
	for _, t := range tables {
		if err := writeEHRCSV(dir, t); err != nil {
			return nil, err
		}
	}
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dbPath, err)
	}
	defer db.Close()
	g := &ehrGen{db: db}
	instr := ehrsql24Instruction(ddl)
	var stats []EHRSQL2024Stats
	for _, sp := range ehrsql24Splits {
		st := EHRSQL2024Stats{Split: sp.ours}
		var out []tasks.Task
		for _, q := range splits[sp.upstream] {
			st.Questions++
			t, ok, err := ehrsql24Task(ctx, g, q, &st)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			t.View.Split = sp.ours
			t.View.Instruction = instr
			out = append(out, t)
		}
		st.Kept = len(out)
		if err := tasks.WriteTasks(filepath.Join(dir, sp.ours+".jsonl"), out); err != nil {
			return nil, err
		}
		slog.Info("ehrsql2024 generated", "split", sp.ours, "questions", st.Questions, "unanswerable", st.Unanswerable,
			"tasks", st.Kept, "reconstructed_chartevents", st.Reconstructed, "left_out_empty", st.Empty,
			"left_out_null", st.NullValue, "left_out_over_100_rows", st.TooMany, "left_out_sql_error", st.SQLError,
			"agree_with_authors", st.Agree, "compared", st.Compared, "cost_agree", st.CostAgree, "cost_compared", st.CostCompared,
			"chart_agree", st.ChartAgree, "chart_compared", st.ChartCompared)
		stats = append(stats, st)
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE.md"), []byte(ehrsql2024License), 0o644); err != nil {
		return nil, fmt.Errorf("write licence: %w", err)
	}
	return stats, nil
}

// mimicIVSubjectRe matches a MIMIC-IV subject id (8 digits, 1xxxxxxx).
var mimicIVSubjectRe = regexp.MustCompile(`\b1[0-9]{7}\b`)

var ehrsql24Indexes = map[string][]string{
	"admissions": {"subject_id"}, "icustays": {"hadm_id"}, "transfers": {"hadm_id"},
	"diagnoses_icd": {"hadm_id", "icd_code"}, "procedures_icd": {"hadm_id", "icd_code"},
	"labevents": {"hadm_id", "itemid"}, "prescriptions": {"hadm_id", "drug"},
	"chartevents": {"stay_id", "itemid"}, "inputevents": {"stay_id", "itemid"},
	"outputevents": {"stay_id", "itemid"}, "microbiologyevents": {"hadm_id"}, "cost": {"hadm_id", "event_id"},
	"d_icd_diagnoses": {"long_title"}, "d_icd_procedures": {"long_title"},
}

// readEHRSQL24Split reads data.json, label.json and answer.json of one
// upstream split, in data.json's order.
func readEHRSQL24Split(dir string) ([]ehrsql24Question, error) {
	var data struct {
		Data []struct{ ID, Question string } `json:"data"`
	}
	var labels, answers map[string]json.RawMessage
	for name, v := range map[string]any{"data.json": &data, "label.json": &labels, "answer.json": &answers} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read questions: %w", err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, name), err)
		}
	}
	out := make([]ehrsql24Question, 0, len(data.Data))
	for _, d := range data.Data {
		var label, answer string
		if err := json.Unmarshal(labels[d.ID], &label); err != nil {
			return nil, fmt.Errorf("%s: label of %s: %w", dir, d.ID, err)
		}
		if err := json.Unmarshal(answers[d.ID], &answer); err != nil {
			return nil, fmt.Errorf("%s: answer of %s: %w", dir, d.ID, err)
		}
		if d.Question == "" || label == "" {
			return nil, fmt.Errorf("%s: question %s has no text or label", dir, d.ID)
		}
		out = append(out, ehrsql24Question{ID: d.ID, Question: d.Question, SQL: label, Answer: answer})
	}
	return out, nil
}

// ehrsql24Task turns one upstream question into a task; ok is false when
// an answerable question is left out (st says why).
func ehrsql24Task(ctx context.Context, g *ehrGen, q ehrsql24Question, st *EHRSQL2024Stats) (tasks.Task, bool, error) {
	id := tasks.EHRSQL2024Dataset + "-" + q.ID
	if q.SQL == schemas.AbstainAnswer {
		st.Unanswerable++
		return tasks.Task{
			View: schemas.TaskView{ID: id, Dataset: tasks.EHRSQL2024Dataset, Category: ehrsql24Category, Question: q.Question,
				AnswerType: schemas.AnswerList, Resources: []string{tasks.EHRSQL2024Dataset}, PermittedActions: tasks.EHRSQLActions},
			Truth: tasks.Truth{Type: schemas.AnswerList, Answer: schemas.AbstainAnswer, Abstention: true, Unanswerable: true,
				Extra: map[string]string{"upstream_id": q.ID}},
			Reference: ehrsql24AbstainReference,
		}, true, nil
	}
	query := ehrsql24PostProcess(q.SQL)
	res, err := g.run(ctx, query)
	switch {
	case errors.Is(err, context.Canceled):
		return tasks.Task{}, false, err
	case err != nil:
		st.SQLError++
		return tasks.Task{}, false, nil
	case len(res.rows) == 0:
		st.Empty++
		return tasks.Task{}, false, nil
	case len(res.rows) > ehrsqlMaxRows:
		st.TooMany++
		return tasks.Task{}, false, nil
	}
	for _, r := range res.rows {
		if r[0] == nil {
			st.NullValue++
			return tasks.Task{}, false, nil
		}
	}
	if q.Answer != schemas.AbstainAnswer {
		agree := ehrsql24Normalise(res.rows) == ehrsql24NormaliseAuthors(q.Answer)
		switch {
		case readsTable(q.SQL, []string{"cost"}):
			st.CostCompared++
			if agree {
				st.CostAgree++
			}
		case readsTable(q.SQL, ehrsql24Reconstructed):
			st.ChartCompared++
			if agree {
				st.ChartAgree++
			}
		default:
			st.Compared++
			if agree {
				st.Agree++
			} else {
				slog.Debug("ehrsql2024 answer differs from the authors'", "id", q.ID)
			}
		}
	}
	t, _, ok := ehrTask(tasks.EHRSQL2024Dataset, ehrsql24Category, q.Question, query, res)
	if !ok {
		st.NullValue++
		return tasks.Task{}, false, nil
	}
	t.View.ID = id
	t.Truth.Abstention = true
	// Compared as the benchmark's scorer compares: numeric cells rounded
	// to 3 decimals (a relative tolerance rejected gold answers as the
	// benchmark prints them, for values below 5).
	t.Truth.Decimals, t.Truth.Tolerance = tasks.EHRSQL2024Decimals, 0
	t.Truth.Extra["upstream_id"] = q.ID
	t.Truth.Extra["upstream_sql"] = q.SQL
	delete(t.Truth.Extra, "template")
	if readsTable(q.SQL, ehrsql24Reconstructed) {
		st.Reconstructed++
		t.Truth.Extra["reconstructed"] = "chartevents: rebuilt from the MEDS copy of the MIMIC-IV demo (values rounded from float32, ids from the nearest ICU stay)"
	}
	return t, true, nil
}

// ehrsql24Category is every task's category: answerability is part of
// the ground truth and stays out of the agent-visible view.
const ehrsql24Category = "text_to_sql"

// ehrsql24AbstainReference is the reference solution of an unanswerable
// question: it abstains with the reserved answer.
const ehrsql24AbstainReference = "# The database cannot answer this question: abstain with the reserved answer.\nprint(\"null\")\n"

// ehrsql24PostProcess is EHRSQL 2024's post_process_sql (its scoring
// program): whitespace collapsed, "< =" joined, current_time fixed, vital
// normal ranges substituted, %y/%j made %Y/%J.
func ehrsql24PostProcess(q string) string {
	q = strings.TrimSpace(strings.Join(strings.Fields(strings.ReplaceAll(q, "\n", " ")), " "))
	q = strings.NewReplacer("> =", ">=", "< =", "<=", "! =", "!=").Replace(q)
	q = strings.ReplaceAll(q, "current_time", "'"+ehrsql24Now+"'")
	lo, hi := ehrsql24VitalLower.FindStringSubmatch(q), ehrsql24VitalUpper.FindStringSubmatch(q)
	if lo != nil && hi != nil && lo[2] == hi[2] {
		if r, ok := ehrsql24VitalRanges[strings.ReplaceAll(lo[2], "_", " ")]; ok {
			q = strings.ReplaceAll(q, lo[1], r[0])
			q = strings.ReplaceAll(q, hi[1], r[1])
		}
	}
	return strings.NewReplacer("%y", "%Y", "%j", "%J").Replace(q)
}

var (
	ehrsql24VitalLower  = regexp.MustCompile(`[ \n]+(([a-zA-Z0-9_]+)_lower)`)
	ehrsql24VitalUpper  = regexp.MustCompile(`[ \n]+(([a-zA-Z0-9_]+)_upper)`)
	ehrsql24VitalRanges = map[string][2]string{
		"temperature": {"35.5", "38.1"}, "sao2": {"95.0", "100.0"}, "heart rate": {"60.0", "100.0"},
		"respiration": {"12.0", "18.0"}, "systolic bp": {"90.0", "120.0"}, "diastolic bp": {"60.0", "90.0"},
		"mean bp": {"60.0", "110.0"},
	}
)

// ehrsql24Normalise writes a one-column result as the authors' answer.json
// holds it: cells as text, floats rounded to 3 decimals, rows sorted, the
// first 100 kept.
func ehrsql24Normalise(rows [][]any) string {
	cells := make([]string, 0, len(rows))
	for _, r := range rows {
		switch v := r[0].(type) {
		case float64:
			cells = append(cells, ehrsql24Round(v))
		case []byte:
			cells = append(cells, string(v))
		default:
			cells = append(cells, ehrValueText(v))
		}
	}
	sort.Strings(cells)
	if len(cells) > ehrsqlMaxRows {
		cells = cells[:ehrsqlMaxRows]
	}
	return strings.Join(cells, "\x00")
}

// ehrsql24Round is str(round(v, 3)).
func ehrsql24Round(v float64) string {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 3, 64), 64)
	if err != nil {
		return pyFloat(v)
	}
	return pyFloat(r)
}

// ehrsql24NormaliseAuthors parses an authors' answer ("[['iv'], ['po']]")
// into the same form; numbers in it are already rounded.
func ehrsql24NormaliseAuthors(a string) string {
	cells := ehrsql24Cell.FindAllStringSubmatch(a, -1)
	out := make([]string, 0, len(cells))
	for _, c := range cells {
		v := c[1]
		if v == "" {
			v = c[2]
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil && strings.Contains(v, ".") {
			v = ehrsql24Round(f)
		}
		out = append(out, v)
	}
	sort.Strings(out)
	if len(out) > ehrsqlMaxRows {
		out = out[:ehrsqlMaxRows]
	}
	return strings.Join(out, "\x00")
}

// ehrsql24Cell matches one single-cell row of an authors' answer.
var ehrsql24Cell = regexp.MustCompile(`\[(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\]`)

// ehrsql24Instruction is the dataset instruction: MedAgentGym's EHR
// structure plus the abstention contract.
func ehrsql24Instruction(ddl *ehrDDL) string {
	var b strings.Builder
	b.WriteString("You are a biomedical expert in handling EHR data and answer questions accordingly. ")
	b.WriteString("Your objective is to solve a coding problem with given EHR data, with the goal of finally giving a concrete answer to the question.\n")
	b.WriteString("Assume you have knowledge of several tables:\n")
	b.WriteString("The database follows EHRSQL 2024's MIMIC-IV schema. Patients are identified by subject_id, hospital " +
		"admissions by hadm_id and ICU stays by stay_id. Event tables (diagnoses_icd, procedures_icd, labevents, " +
		"prescriptions, chartevents, inputevents, outputevents, microbiologyevents, cost) link to patients and admissions " +
		"through these ids; the d_ tables are dictionaries that map codes and item ids (icd_code, itemid) to names " +
		"(long_title, label). ICD codes are written icd<version>|<code>. All text values are lower-case. The current time is " +
		ehrsql24Now + "; an admission or ICU stay without a discharge time (dischtime / outtime) is the current one.\n")
	for i, n := range ddl.tables {
		fmt.Fprintf(&b, "(%d) %s: %s\n", i+1, n, strings.Join(ddl.cols[strings.ToLower(n)], ", "))
	}
	fmt.Fprintf(&b, "All the tables are saved in the data directory /data/%s as CSV files named <TABLE>.csv "+
		"(header = the lower-case column names; use pandas to read them). The same data is also in the SQLite "+
		"database /data/%s/%s.db (read-only).\n", tasks.EHRSQL2024Dataset, tasks.EHRSQL2024Dataset, tasks.EHRSQL2024Dataset)
	b.WriteString("Write Python code that computes the answer, store it in a variable named `answer`, and print it: " +
		"a single number or value for a scalar answer, true/false for a yes/no question, and a Python list for " +
		"several values.\n")
	b.WriteString("Some questions cannot be answered from this database (the data they need is not recorded). " +
		"For such a question, abstain: your answer is then " + strconv.Quote(schemas.AbstainAnswer) + " (print " +
		schemas.AbstainAnswer + " as the last line of your program's output, or, where the answer action is available, " +
		"answer " + schemas.AbstainAnswer + "). An abstention is final. It scores better than a wrong answer, which is " +
		"penalised, but worse than the right answer to a question the data can answer.")
	return b.String()
}
