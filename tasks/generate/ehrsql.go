package generate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

// EHRSQL task sets (MIMIC-III and eICU demo). Generation builds an
// EHRSQL-schema SQLite database from the PhysioNet demo CSVs, re-instantiates
// EHRSQL's question templates (the v1.5.1 valid rows are the seeds: their
// gold SQL is reused with new values sampled from the demo data), runs the
// gold SQL, and keeps instances with a well-defined answer.

//go:embed ehrsql/LICENSE.md
var ehrsqlLicense string

const (
	ehrsqlSeed         = 20250614 // fixed seed of every EHRSQL draw
	ehrsqlPerTemplate  = 20       // instances kept per template (q_tag) at most
	ehrsqlAttempts     = 160      // instantiation attempts per template
	ehrsqlMaxRows      = 100      // EHRSQL compares at most 100 rows
	ehrsqlTestPercent  = 20       // share of questions in the test split
	ehrsqlQueryTimeout = 5 * time.Second
)

// ehrSpec describes one EHRSQL database.
type ehrSpec struct {
	dataset  string // "mimic_iii" or "eicu"
	demoDir  string // demo CSVs, relative to the data root
	seedDir  string // EHRSQL templates, relative to the data root
	ddlFile  string // schema file name in seedDir
	build    func(ctx context.Context, src string, ddl *ehrDDL, rng *rand.Rand) (*ehrBuild, []string, error)
	indexes  map[string][]string
	patients string // SQL: every patient id (as the SQL literal writes it)
	// patientSQL matches a patient id literal in the gold SQL (%s is the
	// quoted-for-regexp id).
	patientSQL string
	slots      map[string]string // value slot → SQL of (patient, value[, number]) rows
	missing    []string          // tables absent from the demo: their questions are skipped
	primer     string
}

// generateMIMICIII is the mimic_iii Generator.
func generateMIMICIII(ctx context.Context, dataRoot, dir string) error {
	return generateEHRSQL(ctx, mimicSpec, dataRoot, dir)
}

// generateEICU is the eicu Generator.
func generateEICU(ctx context.Context, dataRoot, dir string) error {
	return generateEHRSQL(ctx, eicuSpec, dataRoot, dir)
}

var mimicSpec = &ehrSpec{
	dataset: "mimic_iii", demoDir: "mimic-iii-demo", seedDir: "ehrsql-templates/mimic_iii", ddlFile: "mimic_iii.sql",
	build: buildMIMIC,
	indexes: map[string][]string{
		"admissions": {"subject_id"}, "icustays": {"hadm_id"}, "transfers": {"hadm_id"},
		"diagnoses_icd": {"hadm_id", "icd9_code"}, "procedures_icd": {"hadm_id", "icd9_code"},
		"labevents": {"hadm_id", "itemid"}, "prescriptions": {"hadm_id", "drug"},
		"chartevents": {"icustay_id", "itemid"}, "inputevents_cv": {"icustay_id", "itemid"},
		"outputevents": {"icustay_id", "itemid"}, "microbiologyevents": {"hadm_id"}, "cost": {"hadm_id", "event_id"},
		"d_icd_diagnoses": {"short_title"}, "d_icd_procedures": {"short_title"},
	},
	patients:   "SELECT DISTINCT subject_id FROM admissions ORDER BY subject_id",
	patientSQL: `subject_id = %s\b`,
	slots: map[string]string{
		"drug_name":       "SELECT subject_id, drug FROM prescriptions ORDER BY row_id",
		"drug_route":      "SELECT subject_id, route FROM prescriptions ORDER BY row_id",
		"lab_name":        "SELECT l.subject_id, d.label, l.valuenum FROM labevents l JOIN d_labitems d ON l.itemid = d.itemid ORDER BY l.row_id",
		"vital_name":      "SELECT c.subject_id, d.label, c.valuenum FROM chartevents c JOIN d_items d ON c.itemid = d.itemid ORDER BY c.row_id",
		"intake_name":     "SELECT c.subject_id, d.label FROM inputevents_cv c JOIN d_items d ON c.itemid = d.itemid ORDER BY c.row_id",
		"output_name":     "SELECT c.subject_id, d.label FROM outputevents c JOIN d_items d ON c.itemid = d.itemid ORDER BY c.row_id",
		"diagnosis_name":  "SELECT x.subject_id, d.short_title FROM diagnoses_icd x JOIN d_icd_diagnoses d ON x.icd9_code = d.icd9_code ORDER BY x.row_id",
		"procedure_name":  "SELECT x.subject_id, d.short_title FROM procedures_icd x JOIN d_icd_procedures d ON x.icd9_code = d.icd9_code ORDER BY x.row_id",
		"abbreviation":    "SELECT x.subject_id, d.short_title FROM diagnoses_icd x JOIN d_icd_diagnoses d ON x.icd9_code = d.icd9_code UNION ALL SELECT x.subject_id, d.short_title FROM procedures_icd x JOIN d_icd_procedures d ON x.icd9_code = d.icd9_code",
		"culture_name":    "SELECT subject_id, spec_type_desc FROM microbiologyevents ORDER BY row_id",
		"admission_route": "SELECT subject_id, admission_location FROM admissions ORDER BY row_id",
		"careunit":        "SELECT subject_id, careunit FROM transfers WHERE careunit IS NOT NULL ORDER BY row_id",
	},
	primer: "The database follows EHRSQL's MIMIC-III schema. Patients are identified by subject_id, hospital " +
		"admissions by hadm_id and ICU stays by icustay_id. Event tables (diagnoses_icd, procedures_icd, labevents, " +
		"prescriptions, chartevents, inputevents_cv, outputevents, microbiologyevents, cost) link to patients and " +
		"admissions through these ids; the d_ tables are dictionaries that map codes and item ids (icd9_code, itemid) " +
		"to names (short_title, long_title, label). All text values are lower-case. The current time is " + ehrNow +
		"; an admission or ICU stay without a discharge time (dischtime / outtime) is the current one.",
}

// ehrSeed is one answerable EHRSQL row used as a template seed.
type ehrSeed struct {
	Template string         `json:"template"`
	Query    string         `json:"query"`
	Value    map[string]any `json:"value"`
	QTag     string         `json:"q_tag"`
	TTag     []string       `json:"t_tag"`
	Impos    bool           `json:"is_impossible"`
}

// ehrPool holds the sampled values of one slot, overall and per patient.
type ehrPool struct {
	vals      []string
	nums      []string // parallel to vals; "" when there is no number
	byPatient map[string][]int
}

// ehrGen is the state of one dataset's generation.
type ehrGen struct {
	spec     *ehrSpec
	db       *sql.DB
	rng      *rand.Rand
	pools    map[string]*ehrPool
	patients []string
	current  []string
	seen     map[string]bool
}

func generateEHRSQL(ctx context.Context, spec *ehrSpec, dataRoot, dir string) error {
	ddl, err := parseEHRDDL(filepath.Join(dataRoot, spec.seedDir, spec.ddlFile))
	if err != nil {
		return fmt.Errorf("%s: %w", spec.dataset, err)
	}
	rng := rand.New(rand.NewPCG(ehrsqlSeed, uint64(len(spec.dataset))))
	b, current, err := spec.build(ctx, filepath.Join(dataRoot, spec.demoDir), ddl, rng)
	if err != nil {
		return fmt.Errorf("%s: build database: %w", spec.dataset, err)
	}
	dbPath := filepath.Join(dir, spec.dataset+".db")
	tables := b.ordered()
	if err := writeEHRDatabase(ctx, dbPath, ddl, tables, spec.indexes); err != nil {
		return fmt.Errorf("%s: %w", spec.dataset, err)
	}
	for _, t := range tables {
		if err := writeEHRCSV(dir, t); err != nil {
			return fmt.Errorf("%s: %w", spec.dataset, err)
		}
	}
	seeds, err := readEHRSeeds(filepath.Join(dataRoot, spec.seedDir, "valid.json"), spec.missing)
	if err != nil {
		return fmt.Errorf("%s: %w", spec.dataset, err)
	}
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	if err != nil {
		return fmt.Errorf("%s: open %s: %w", spec.dataset, dbPath, err)
	}
	defer db.Close()
	g := &ehrGen{spec: spec, db: db, rng: rand.New(rand.NewPCG(ehrsqlSeed, 7)), current: current, seen: map[string]bool{}}
	if err := g.loadPools(ctx); err != nil {
		return fmt.Errorf("%s: %w", spec.dataset, err)
	}
	instr := ehrInstruction(spec, ddl)
	var all []tasks.Task
	for _, qtag := range sortedSeedTags(seeds) {
		ts, err := g.instantiate(ctx, qtag, seeds[qtag])
		if err != nil {
			return fmt.Errorf("%s: template %q: %w", spec.dataset, qtag, err)
		}
		all = append(all, ts...)
	}
	splits := map[string][]tasks.Task{}
	for i := range all {
		t := &all[i]
		t.View.ID = fmt.Sprintf("%s-%d", spec.dataset, i)
		t.View.Instruction = instr
		t.View.Split = ehrSplit(t.View.Question)
		splits[t.View.Split] = append(splits[t.View.Split], *t)
	}
	for _, split := range []string{"train", "test"} {
		if err := tasks.WriteTasks(filepath.Join(dir, split+".jsonl"), splits[split]); err != nil {
			return fmt.Errorf("%s: %w", spec.dataset, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE.md"), []byte(ehrsqlLicense), 0o644); err != nil {
		return fmt.Errorf("%s: write licence: %w", spec.dataset, err)
	}
	return nil
}

// ehrSplit assigns a question to a split by a hash of its text, so a
// question is in exactly one split and keeps it across regenerations.
func ehrSplit(question string) string {
	h := sha256.Sum256([]byte(question))
	if binary.BigEndian.Uint32(h[:4])%100 < ehrsqlTestPercent {
		return "test"
	}
	return "train"
}

// readEHRSeeds returns the answerable rows by q_tag, leaving out those whose
// gold SQL reads a missing table.
func readEHRSeeds(path string, missing []string) (map[string][]ehrSeed, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read templates: %w", err)
	}
	var rows []ehrSeed
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, fmt.Errorf("read templates %s: %w", path, err)
	}
	out := map[string][]ehrSeed{}
	for _, r := range rows {
		if r.Impos || r.Query == "" || r.Query == "null" || readsTable(r.Query, missing) {
			continue
		}
		out[r.QTag] = append(out[r.QTag], r)
	}
	return out, nil
}

// readsTable reports whether query names one of tables (as "<table>.").
func readsTable(query string, tables []string) bool {
	q := strings.ToLower(query)
	for _, t := range tables {
		if regexp.MustCompile(`\b` + t + `\b`).MatchString(q) {
			return true
		}
	}
	return false
}

func sortedSeedTags(m map[string][]ehrSeed) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// loadPools reads the patients and every slot's values from the database.
func (g *ehrGen) loadPools(ctx context.Context) error {
	rows, err := g.db.QueryContext(ctx, g.spec.patients)
	if err != nil {
		return fmt.Errorf("load patients: %w", err)
	}
	for rows.Next() {
		var v any
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("load patients: %w", err)
		}
		g.patients = append(g.patients, ehrValueText(v))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load patients: %w", err)
	}
	g.pools = map[string]*ehrPool{}
	for _, slot := range sortedKeys(g.spec.slots) {
		p := &ehrPool{byPatient: map[string][]int{}}
		rows, err := g.db.QueryContext(ctx, g.spec.slots[slot])
		if err != nil {
			return fmt.Errorf("load slot %s: %w", slot, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			dst := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range dst {
				ptrs[i] = &dst[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return fmt.Errorf("load slot %s: %w", slot, err)
			}
			val := ehrValueText(dst[1])
			if dst[1] == nil || val == "" || strings.ContainsAny(val, `'"\`) {
				continue
			}
			num := ""
			if len(dst) > 2 && dst[2] != nil {
				num = ehrNumLiteral(dst[2])
			}
			pid := ehrValueText(dst[0])
			p.byPatient[pid] = append(p.byPatient[pid], len(p.vals))
			p.vals = append(p.vals, val)
			p.nums = append(p.nums, num)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("load slot %s: %w", slot, err)
		}
		g.pools[slot] = p
	}
	return nil
}

// ehrNumLiteral writes a number as EHRSQL's value dict does ("97.0").
func ehrNumLiteral(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10) + ".0"
	case float64:
		return pyFloat(x)
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var slotDigits = regexp.MustCompile(`[0-9]+$`)

// instantiate draws up to ehrsqlPerTemplate tasks of one template.
func (g *ehrGen) instantiate(ctx context.Context, qtag string, seeds []ehrSeed) ([]tasks.Task, error) {
	var out []tasks.Task
	falsy := 0
	for attempt := 0; attempt < ehrsqlAttempts && len(out) < ehrsqlPerTemplate; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		seed := seeds[g.rng.IntN(len(seeds))]
		question, query, ok := g.resample(seed)
		if !ok || g.seen[question] {
			continue
		}
		g.seen[question] = true
		query = ehrRewriteSQL(query)
		res, err := g.run(ctx, query)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil, err
			}
			continue // a timeout or an SQL error on this instance: skip it
		}
		t, isFalsy, ok := ehrTask(g.spec.dataset, qtag, question, query, res)
		if !ok {
			continue
		}
		if isFalsy {
			if 4*(falsy+1) > ehrsqlPerTemplate {
				continue // keep yes/no and count answers balanced
			}
			falsy++
		}
		out = append(out, t)
	}
	return out, nil
}

// resample re-instantiates a seed row with values sampled from the
// database: a patient first (a current one for "current visit" filters),
// then that patient's own drugs, labs, … (global values without a patient).
func (g *ehrGen) resample(s ehrSeed) (question, query string, ok bool) {
	question, query = s.Template, strings.ToLower(s.Query)
	keys := sortedKeys(s.Value)
	pid := ""
	type sub struct{ key, old, new string }
	var subs []sub
	if old, has := s.Value["patient_id"]; has {
		cur := false
		for _, t := range s.TTag {
			cur = cur || strings.HasSuffix(t, "-cur")
		}
		switch {
		case cur && len(g.current) > 0:
			pid = g.current[g.rng.IntN(len(g.current))]
		case g.rng.IntN(8) == 0 && len(g.current) > 0:
			pid = g.current[g.rng.IntN(len(g.current))]
		default:
			pid = g.patients[g.rng.IntN(len(g.patients))]
		}
		subs = append(subs, sub{"patient_id", ehrValueString(old), pid})
	}
	used := map[string]bool{}
	nums := map[string]string{} // base slot → number of the drawn row
	drawnOld := map[string]bool{}
	for _, k := range keys {
		base := slotDigits.ReplaceAllString(k, "")
		p := g.pools[base]
		if k == "patient_id" || p == nil || drawnOld[ehrValueString(s.Value[k])] {
			continue // fixed slot, or an alias of a slot already drawn
		}
		drawnOld[ehrValueString(s.Value[k])] = true
		idx := p.byPatient[pid]
		if pid == "" {
			idx = nil
		}
		pick := -1
		for try := 0; try < 8; try++ {
			var i int
			if pid != "" {
				if len(idx) == 0 {
					return "", "", false
				}
				i = idx[g.rng.IntN(len(idx))]
			} else {
				if len(p.vals) == 0 {
					return "", "", false
				}
				i = g.rng.IntN(len(p.vals))
			}
			if !used[p.vals[i]] {
				pick = i
				break
			}
		}
		if pick < 0 {
			return "", "", false
		}
		used[p.vals[pick]] = true
		nums[base] = p.nums[pick]
		subs = append(subs, sub{k, ehrValueString(s.Value[k]), p.vals[pick]})
	}
	for _, k := range []string{"lab_value", "vital_value"} {
		old, has := s.Value[k]
		if !has {
			continue
		}
		n := nums[strings.TrimSuffix(k, "_value")+"_name"]
		if n == "" {
			return "", "", false
		}
		subs = append(subs, sub{k, ehrValueString(old), n})
	}
	// Two passes through placeholder tokens, so a new value never gets
	// replaced again.
	for i, x := range subs {
		tok := fmt.Sprintf("\x00%d\x00", i)
		var n int
		switch {
		case x.key == "patient_id":
			q := regexp.QuoteMeta(x.old)
			re := regexp.MustCompile(fmt.Sprintf(g.spec.patientSQL, q))
			n = len(re.FindAllStringIndex(query, -1))
			query = re.ReplaceAllStringFunc(query, func(m string) string { return strings.Replace(m, x.old, tok, 1) })
			question, ok = replaceBounded(question, "patient "+x.old, "patient "+tok)
		case strings.HasSuffix(x.key, "_value"):
			query, ok = replaceBounded(query, x.old, tok)
			n = 1
			if ok {
				question, ok = replaceBounded(question, x.old, tok)
			}
		default:
			n = strings.Count(query, "'"+x.old+"'")
			query = strings.ReplaceAll(query, "'"+x.old+"'", "'"+tok+"'")
			question, ok = replaceBounded(question, x.old, tok)
		}
		if n == 0 || !ok {
			return "", "", false
		}
	}
	for i, x := range subs {
		tok := fmt.Sprintf("\x00%d\x00", i)
		query = strings.ReplaceAll(query, tok, x.new)
		question = strings.ReplaceAll(question, tok, x.new)
	}
	return question, query, true
}

// ehrValueString writes a value-dict entry as its text ("7107", "50.0").
func ehrValueString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		if x == float64(int64(x)) && x > 1000 {
			return strconv.FormatInt(int64(x), 10) // patient ids
		}
		return pyFloat(x)
	default:
		return fmt.Sprint(x)
	}
}

// replaceBounded replaces every occurrence of old in s that is not part of
// a longer word or number; ok is false when there is none.
func replaceBounded(s, old, repl string) (string, bool) {
	re := regexp.MustCompile(`(^|[^a-z0-9.])` + regexp.QuoteMeta(old) + `($|[^a-z0-9])`)
	if !re.MatchString(s) {
		return s, false
	}
	// Matches may share a boundary character; loop until none is left.
	for re.MatchString(s) {
		s = re.ReplaceAllStringFunc(s, func(m string) string {
			loc := strings.Index(m, old)
			return m[:loc] + repl + m[loc+len(old):]
		})
	}
	return s, true
}

// ehrVitalRanges are the normal ranges EHRSQL substitutes for
// "<vital>_lower/_upper".
var ehrVitalRanges = strings.NewReplacer(
	"temperature_lower", "35.5", "temperature_upper", "38.1", "sao2_lower", "95.0", "sao2_upper", "100.0",
	"heart_rate_lower", "60.0", "heart_rate_upper", "100.0", "respiration_lower", "12.0", "respiration_upper", "18.0",
	"systolic_bp_lower", "90.0", "systolic_bp_upper", "120.0", "diastolic_bp_lower", "60.0", "diastolic_bp_upper", "90.0",
	"mean_bp_lower", "60.0", "mean_bp_upper", "110.0")

// ehrRewriteSQL applies the EHRSQL evaluator's rewriting to a gold query.
func ehrRewriteSQL(q string) string {
	q = strings.ToLower(q)
	q = strings.ReplaceAll(q, "current_time", "'"+ehrNow+"'")
	q = ehrVitalRanges.Replace(q)
	q = strings.ReplaceAll(q, "< =", "<=")
	q = strings.ReplaceAll(q, "> =", ">=")
	q = strings.ReplaceAll(q, "%y", "%Y")
	q = strings.ReplaceAll(q, "%j", "%J")
	return q
}

// ehrResult is a query result: the column count and the rows.
type ehrResult struct {
	cols int
	rows [][]any
}

func (g *ehrGen) run(ctx context.Context, query string) (ehrResult, error) {
	ctx, cancel := context.WithTimeout(ctx, ehrsqlQueryTimeout)
	defer cancel()
	rows, err := g.db.QueryContext(ctx, query)
	if err != nil {
		return ehrResult{}, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return ehrResult{}, err
	}
	res := ehrResult{cols: len(cols)}
	for rows.Next() {
		dst := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range dst {
			ptrs[i] = &dst[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return ehrResult{}, err
		}
		res.rows = append(res.rows, dst)
		if len(res.rows) > ehrsqlMaxRows {
			break
		}
	}
	return res, rows.Err()
}

var (
	scalarSQL = regexp.MustCompile(`^select (count\(|sum\(|avg\(|max\(|min\(|\(|[0-9]+ \* \()`)
	yesNoQ    = regexp.MustCompile(`^(has|have|is|was|are|were|did|does|do)\b`)
)

// ehrTask turns an executed instance into a task; ok is false when the
// answer is not well defined (empty, NULL, several columns, too many rows).
// falsy marks a "no" or a zero count.
func ehrTask(dataset, qtag, question, query string, res ehrResult) (t tasks.Task, falsy, ok bool) {
	if res.cols != 1 || len(res.rows) == 0 || len(res.rows) > ehrsqlMaxRows {
		return tasks.Task{}, false, false
	}
	values := make([]string, len(res.rows))
	for i, r := range res.rows {
		if r[0] == nil {
			return tasks.Task{}, false, false
		}
		if b, isBytes := r[0].([]byte); isBytes {
			r[0] = string(b)
		}
		values[i] = ehrValueText(r[0])
	}
	typ := schemas.AnswerList
	lq := strings.ToLower(query)
	if len(res.rows) == 1 && scalarSQL.MatchString(lq) {
		switch v := res.rows[0][0].(type) {
		case int64:
			switch {
			case yesNoQ.MatchString(strings.ToLower(question)) && (v == 0 || v == 1):
				typ = schemas.AnswerBoolean
			case strings.HasPrefix(lq, "select count("):
				typ = schemas.AnswerInteger
			default:
				typ = schemas.AnswerNumber
			}
		case float64:
			typ = schemas.AnswerNumber
		}
	}
	truth := tasks.Truth{Type: typ, Extra: map[string]string{"template": qtag, "sql": query}}
	switch typ {
	case schemas.AnswerBoolean:
		yes := res.rows[0][0].(int64) == 1
		truth.Answer = strconv.FormatBool(yes)
		truth.Values = []string{truth.Answer}
		falsy = !yes
	case schemas.AnswerInteger:
		truth.Answer = values[0]
		truth.Values = values
		falsy = values[0] == "0"
	case schemas.AnswerNumber:
		truth.Answer = values[0]
		truth.Values = values
		truth.Tolerance = tasks.EHRSQLTolerance
	default:
		raw, err := ehrJSONList(res.rows)
		if err != nil {
			return tasks.Task{}, false, false
		}
		truth.Answer = raw
		truth.Values = values
		truth.Tolerance = tasks.EHRSQLTolerance
	}
	t = tasks.Task{
		View: schemas.TaskView{
			Dataset: dataset, Category: qtag, Question: question, AnswerType: typ,
			Resources: []string{dataset}, PermittedActions: tasks.EHRSQLActions,
		},
		Truth:     truth,
		Reference: ehrReference(dataset, query, typ),
	}
	return t, falsy, true
}

// ehrJSONList writes the first column of rows as a JSON list (numbers as
// numbers, floats as Python writes them).
func ehrJSONList(rows [][]any) (string, error) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, r := range rows {
		if i > 0 {
			buf.WriteString(", ")
		}
		switch v := r[0].(type) {
		case int64, float64:
			buf.WriteString(ehrValueText(v))
		default:
			b, err := json.Marshal(ehrValueText(v))
			if err != nil {
				return "", fmt.Errorf("answer list: %w", err)
			}
			buf.Write(b)
		}
	}
	buf.WriteByte(']')
	return buf.String(), nil
}

// ehrReference is the reference solution: it runs the gold SQL on the
// SQLite file next to the CSVs and prints the answer in the form the
// strict verifier reads for the answer type.
func ehrReference(dataset, query string, typ schemas.AnswerType) string {
	var lit bytes.Buffer
	enc := json.NewEncoder(&lit)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(query) // a JSON string is a valid Python string literal
	var out string
	switch typ {
	case schemas.AnswerBoolean:
		out = "answer = bool(rows[0][0])\nprint(\"true\" if answer else \"false\")\n"
	case schemas.AnswerInteger:
		out = "answer = int(rows[0][0])\nprint(answer)\n"
	case schemas.AnswerNumber:
		out = "answer = float(rows[0][0])\nprint(repr(answer))\n"
	default:
		out = "answer = [r[0] for r in rows[:100]]\nprint(json.dumps(answer))\n"
	}
	return "import json\nimport os\nimport sqlite3\n\n" +
		"DATA_DIR = os.environ.get(\"MEDGYM_DATA_DIR\", \"/data/" + dataset + "\")\n" +
		"SQL = " + strings.TrimSpace(lit.String()) + "\n\n" +
		"con = sqlite3.connect(\"file:\" + os.path.join(DATA_DIR, \"" + dataset + ".db\") + \"?mode=ro&immutable=1\", uri=True)\n" +
		"rows = con.execute(SQL).fetchall()\n" + out
}

// ehrInstruction is the dataset instruction, in MedAgentGym's structure:
// role, objective, schema primer, numbered table list, data location.
func ehrInstruction(spec *ehrSpec, ddl *ehrDDL) string {
	var b strings.Builder
	b.WriteString("You are a biomedical expert in handling EHR data and answer questions accordingly. ")
	b.WriteString("Your objective is to solve a coding problem with given EHR data, with the goal of finally giving a concrete answer to the question.\n")
	b.WriteString("Assume you have knowledge of several tables:\n")
	b.WriteString(spec.primer + "\n")
	for i, n := range ddl.tables {
		fmt.Fprintf(&b, "(%d) %s: %s\n", i+1, n, strings.Join(ddl.cols[strings.ToLower(n)], ", "))
	}
	fmt.Fprintf(&b, "All the tables are saved in the data directory /data/%s as CSV files named <TABLE>.csv "+
		"(header = the lower-case column names; use pandas to read them). The same data is also in the SQLite "+
		"database /data/%s/%s.db (read-only).\n", spec.dataset, spec.dataset, spec.dataset)
	b.WriteString("Write Python code that computes the answer, store it in a variable named `answer`, and print it: " +
		"a single number or value for a scalar answer, true/false for a yes/no question, and a Python list for " +
		"several values.")
	return b.String()
}
