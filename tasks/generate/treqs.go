package generate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

// TREQS task set (MIMICSQL questions on the MIMIC-III demo). Generation
// rebuilds TREQS's 5-table database from the demo CSVs (treqs_db.go), then
// re-instantiates every MIMICSQL question: the logical form (`format`) is the
// template; its condition values are replaced with values drawn from one
// demo admission (so the conditions hold together), the SQL is regenerated
// from the form, and the question text (template wording, and the natural
// wording when it spells the values verbatim) gets the new values. The
// answer is the result of running the SQL; only non-empty, well-defined
// results are kept.

const (
	treqsSeed         = 20250616 // fixed seed of every TREQS draw
	treqsDraws        = 2        // instantiations per MIMICSQL row
	treqsTries        = 16       // admissions tried per instantiation
	treqsMaxValues    = 20       // longest list answer kept
	treqsTestPercent  = 30       // share of instances (by SQL) in the test split
	treqsQueryTimeout = 5 * time.Second
	treqsTolerance    = 1e-4
	treqsNamesFile    = "mimicsql/id2name.csv.gz"
	treqsDemoDir      = "mimic-iii-demo"
)

// treqsRowFiles are the MIMICSQL files read, in order: the template
// wording and its two natural rephrasings share keys and logical forms.
var treqsRowFiles = []string{"dev.json", "test.json"}

// treqsNaturalDirs are the natural-wording variants.
var treqsNaturalDirs = []string{"mimicsql_natural", "mimicsql_natural_v2"}

// treqsAggs are the aggregate names by `sel` index.
var treqsAggs = []string{"select", "count", "max", "min", "avg"}

// treqsOps are the condition operators by index.
var treqsOps = []string{"=", ">", "<", ">=", "<="}

// treqsFormat is MIMICSQL's logical form.
type treqsFormat struct {
	Table  []int   `json:"table"`
	Sel    int     `json:"sel"`
	AggCol [][]int `json:"agg_col"`
	Cond   [][]any `json:"cond"`
}

// treqsCond is one parsed condition: table, column, operator and the value
// as written in the SQL ("F", "2131.0") and in the question ("f", "2131").
type treqsCond struct {
	table, col, op int
	sqlText        string
	qText          string
	float          bool
}

// treqsRow is one MIMICSQL row (template wording) with its natural
// wordings.
type treqsRow struct {
	Key      string      `json:"key"`
	Question string      `json:"question_refine"`
	SQL      string      `json:"sql"`
	Format   treqsFormat `json:"format"`
	natural  []string
	conds    []treqsCond
}

// parseConds checks the form's indexes and parses its conditions.
func (r *treqsRow) parseConds() error {
	f := r.Format
	if f.Sel < 0 || f.Sel >= len(treqsAggs) || len(f.Table) == 0 || len(f.AggCol) == 0 {
		return fmt.Errorf("key %s: bad format %+v", r.Key, f)
	}
	for _, t := range f.Table {
		if t < 0 || t >= len(tasks.TREQSSchema) {
			return fmt.Errorf("key %s: table index %d", r.Key, t)
		}
	}
	for _, ac := range f.AggCol {
		if len(ac) != 2 || ac[0] < 0 || ac[0] >= len(tasks.TREQSSchema) || ac[1] < 0 || ac[1] >= len(tasks.TREQSSchema[ac[0]].Cols) {
			return fmt.Errorf("key %s: agg_col %v", r.Key, ac)
		}
	}
	r.conds = r.conds[:0]
	for _, c := range f.Cond {
		if len(c) != 4 {
			return fmt.Errorf("key %s: cond %v", r.Key, c)
		}
		var idx [3]int
		for i := range 3 {
			n, ok := c[i].(json.Number)
			v, err := n.Int64()
			if !ok || err != nil {
				return fmt.Errorf("key %s: cond %v", r.Key, c)
			}
			idx[i] = int(v)
		}
		if idx[0] < 0 || idx[0] >= len(tasks.TREQSSchema) || idx[1] < 0 || idx[1] >= len(tasks.TREQSSchema[idx[0]].Cols) ||
			idx[2] < 0 || idx[2] >= len(treqsOps) {
			return fmt.Errorf("key %s: cond %v", r.Key, c)
		}
		tc := treqsCond{table: idx[0], col: idx[1], op: idx[2]}
		switch v := c[3].(type) {
		case string:
			tc.sqlText = v
		case json.Number:
			tc.sqlText = v.String()
			tc.float = strings.ContainsAny(tc.sqlText, ".eE")
		default:
			return fmt.Errorf("key %s: cond value %v", r.Key, c[3])
		}
		tc.qText = treqsQuestionValue(tc.sqlText, tc.float)
		r.conds = append(r.conds, tc)
	}
	if len(r.conds) == 0 {
		return fmt.Errorf("key %s: no condition", r.Key)
	}
	return nil
}

// treqsQuestionValue writes a value as MIMICSQL's questions do: lower-case,
// floats without a trailing ".0".
func treqsQuestionValue(s string, float bool) string {
	s = strings.ToLower(s)
	if float {
		s = strings.TrimSuffix(s, ".0")
	}
	return s
}

// treqsSQL writes the SQL of a logical form with the given condition
// values, by MIMICSQL's rule (the template rows regenerate their `sql`
// byte for byte with quote = `"`). quote is the literal quote character.
func treqsSQL(f treqsFormat, conds []treqsCond, quote string) string {
	col := func(t, c int) string { return tasks.TREQSSchema[t].Name + `."` + tasks.TREQSSchema[t].Cols[c] + `"` }
	var b strings.Builder
	b.WriteString("SELECT ")
	sels := make([]string, len(f.AggCol))
	for i, ac := range f.AggCol {
		sels[i] = col(ac[0], ac[1])
	}
	switch f.Sel {
	case 0:
		b.WriteString(strings.Join(sels, ","))
	case 1:
		b.WriteString("COUNT ( DISTINCT " + strings.Join(sels, ",") + " )")
	default:
		b.WriteString(strings.ToUpper(treqsAggs[f.Sel]) + " ( " + strings.Join(sels, ",") + " )")
	}
	first := tasks.TREQSSchema[f.Table[0]].Name
	b.WriteString(" FROM " + first)
	for _, t := range f.Table[1:] {
		n := tasks.TREQSSchema[t].Name
		fmt.Fprintf(&b, " INNER JOIN %s on %s.HADM_ID = %s.HADM_ID", n, first, n)
	}
	for i, c := range conds {
		if i == 0 {
			b.WriteString(" WHERE ")
		} else {
			b.WriteString(" AND ")
		}
		v := c.sqlText
		if quote == "'" {
			v = strings.ReplaceAll(v, "'", "''")
		}
		b.WriteString(col(c.table, c.col) + " " + treqsOps[c.op] + " " + quote + v + quote)
	}
	return b.String()
}

// readTREQSRows reads the template rows of dir/mimicsql_template and
// attaches the natural wordings with the same key.
func readTREQSRows(root string) ([]treqsRow, error) {
	natural := map[string][]string{}
	for _, d := range treqsNaturalDirs {
		for _, f := range treqsRowFiles {
			rows, err := readTREQSFile(filepath.Join(root, d, f))
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				natural[r.Key] = append(natural[r.Key], r.Question)
			}
		}
	}
	var out []treqsRow
	for _, f := range treqsRowFiles {
		rows, err := readTREQSFile(filepath.Join(root, "mimicsql_template", f))
		if err != nil {
			return nil, err
		}
		for i := range rows {
			rows[i].natural = natural[rows[i].Key]
		}
		out = append(out, rows...)
	}
	return out, nil
}

func readTREQSFile(path string) ([]treqsRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read mimicsql: %w", err)
	}
	defer f.Close()
	var out []treqsRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		var r treqsRow
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if err := r.parseConds(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// treqsGen is the state of one generation.
type treqsGen struct {
	db     *sql.DB
	rng    *rand.Rand
	tables []*ehrTable
	byHadm []map[string][]int // per table: HADM_ID → row indexes
	seen   map[string]bool    // question texts already used
}

func generateTREQS(ctx context.Context, dataRoot, dir string) error {
	tables, err := buildTREQS(ctx, filepath.Join(dataRoot, treqsDemoDir), filepath.Join(dataRoot, treqsNamesFile))
	if err != nil {
		return fmt.Errorf("treqs: build database: %w", err)
	}
	ddl := treqsDDL()
	dbPath := filepath.Join(dir, "treqs.db")
	if err := writeEHRDatabase(ctx, dbPath, ddl, tables, treqsIndexes); err != nil {
		return fmt.Errorf("treqs: %w", err)
	}
	for _, t := range tables {
		if err := writeEHRCSV(dir, t); err != nil {
			return fmt.Errorf("treqs: %w", err)
		}
	}
	rows, err := readTREQSRows(filepath.Join(dataRoot, "mimicsql"))
	if err != nil {
		return fmt.Errorf("treqs: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	if err != nil {
		return fmt.Errorf("treqs: open %s: %w", dbPath, err)
	}
	defer db.Close()
	g := &treqsGen{db: db, rng: rand.New(rand.NewPCG(treqsSeed, 11)), tables: tables, seen: map[string]bool{}}
	for _, t := range tables {
		m := map[string][]int{}
		for i, r := range t.rows {
			h := ehrValueText(r[1])
			m[h] = append(m[h], i)
		}
		g.byHadm = append(g.byHadm, m)
	}
	var all []tasks.Task
	for i := range rows {
		for range treqsDraws {
			ts, err := g.instantiate(ctx, &rows[i])
			if err != nil {
				return fmt.Errorf("treqs: key %s: %w", rows[i].Key, err)
			}
			all = append(all, ts...)
		}
	}
	instr := treqsInstruction()
	splits := map[string][]tasks.Task{}
	for i := range all {
		t := &all[i]
		t.View.ID = fmt.Sprintf("%s-%d", tasks.TREQSDataset, i)
		t.View.Instruction = instr
		t.View.Split = treqsSplit(t.Truth.Extra["sql"])
		splits[t.View.Split] = append(splits[t.View.Split], *t)
	}
	for _, split := range []string{"train", "test"} {
		if err := tasks.WriteTasks(filepath.Join(dir, split+".jsonl"), splits[split]); err != nil {
			return fmt.Errorf("treqs: %w", err)
		}
	}
	lic, err := os.ReadFile(filepath.Join(dataRoot, "mimicsql", "LICENSE"))
	if err != nil {
		return fmt.Errorf("treqs: licence: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE.md"), []byte(treqsLicense+"\n```\n"+strings.TrimSpace(string(lic))+"\n```\n"), 0o644); err != nil {
		return fmt.Errorf("treqs: write licence: %w", err)
	}
	return nil
}

// treqsSplit assigns an instance to a split by a hash of its SQL, so the
// template and natural wordings of one instance share a split.
func treqsSplit(query string) string {
	h := sha256.Sum256([]byte("treqs\x00" + query))
	if binary.BigEndian.Uint32(h[:4])%100 < treqsTestPercent {
		return "test"
	}
	return "train"
}

// instantiate draws new condition values for row from one demo admission,
// runs the SQL and returns the tasks of the wordings that take the values
// (none when no draw gives a well-defined answer).
func (g *treqsGen) instantiate(ctx context.Context, row *treqsRow) ([]tasks.Task, error) {
	for range treqsTries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		conds, ok := g.draw(row)
		if !ok {
			continue
		}
		query := treqsSQL(row.Format, conds, "'")
		res, err := g.run(ctx, query)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil, err
			}
			continue
		}
		ans, ok := treqsAnswer(row.Format.Sel, res)
		if !ok {
			continue
		}
		var out []tasks.Task
		wordings := []string{row.Question}
		if len(row.natural) > 0 {
			wordings = append(wordings, row.natural[g.rng.IntN(len(row.natural))])
		}
		for w, text := range wordings {
			q, ok := treqsRephrase(text, row.conds, conds)
			if !ok || g.seen[q] {
				continue
			}
			g.seen[q] = true
			kind := "template"
			if w > 0 {
				kind = "natural"
			}
			out = append(out, treqsTask(row, q, kind, query, ans))
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, nil
}

// draw picks one admission, then one row of each table of the form for
// it, and takes the condition values from those rows. Inequalities get a
// bound the drawn row satisfies.
func (g *treqsGen) draw(row *treqsRow) ([]treqsCond, bool) {
	demo := g.tables[0].rows
	hadm := ehrValueText(demo[g.rng.IntN(len(demo))][1])
	picked := map[int][]any{}
	need := append([]int(nil), row.Format.Table...)
	for _, c := range row.conds {
		need = append(need, c.table)
	}
	for _, t := range need {
		if picked[t] != nil {
			continue
		}
		idx := g.byHadm[t][hadm]
		if len(idx) == 0 {
			return nil, false
		}
		picked[t] = g.tables[t].rows[idx[g.rng.IntN(len(idx))]]
	}
	out := make([]treqsCond, len(row.conds))
	for i, c := range row.conds {
		v := picked[c.table][c.col]
		nc := c
		switch x := v.(type) {
		case nil:
			return nil, false
		case string:
			if x == "" || strings.ContainsAny(x, "\"\n\\") || strings.TrimSpace(x) != x {
				return nil, false
			}
			if c.op != 0 {
				return nil, false // MIMICSQL compares only numbers with inequalities
			}
			nc.sqlText = x
			nc.float = false
		case int64:
			nc.sqlText = fmt.Sprint(x + treqsOffset(g.rng, c.op))
			nc.float = false
		case float64:
			nc.sqlText = pyFloat(x + float64(treqsOffset(g.rng, c.op)))
			nc.float = true
		default:
			return nil, false
		}
		nc.qText = treqsQuestionValue(nc.sqlText, nc.float)
		out[i] = nc
	}
	return out, true
}

// treqsOffset moves a bound so the drawn value satisfies op: below it for
// ">", above it for "<", and by 0–3 for the inclusive forms.
func treqsOffset(rng *rand.Rand, op int) int64 {
	switch treqsOps[op] {
	case ">":
		return -1 - rng.Int64N(5)
	case "<":
		return 1 + rng.Int64N(5)
	case ">=":
		return -rng.Int64N(4)
	case "<=":
		return rng.Int64N(4)
	}
	return 0
}

// treqsRephrase replaces the old condition values in a question with the
// new ones. Every old value must occur once as a whole word, or once right
// after "is"/"than"/"to", so paraphrases that reword a value are left out.
func treqsRephrase(q string, old, repl []treqsCond) (string, bool) {
	count := map[string]int{}
	for _, c := range old {
		count[c.qText]++
	}
	// Longest values first, so "emergency" is not found inside an already
	// placed "emergency room admit".
	order := make([]int, len(old))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return len(old[order[a]].qText) > len(old[order[b]].qText) })
	for _, i := range order {
		c := old[i]
		if count[c.qText] != 1 {
			return "", false
		}
		re := regexp.MustCompile(`(^|[^a-z0-9.])` + regexp.QuoteMeta(c.qText) + `($|[^a-z0-9])`)
		locs := re.FindAllStringSubmatchIndex(q, -1)
		if len(locs) > 1 {
			// "lab test abnormal status is abnormal": keep the occurrence
			// right after an operator phrase.
			var after [][]int
			for _, l := range locs {
				pre := q[:l[3]]
				if strings.HasSuffix(pre, " is ") || strings.HasSuffix(pre, " than ") || strings.HasSuffix(pre, " to ") {
					after = append(after, l)
				}
			}
			locs = after
		}
		if len(locs) != 1 {
			return "", false
		}
		start, end := locs[0][3], locs[0][4] // end of the prefix group, start of the suffix group
		q = q[:start] + treqsToken(i) + q[end:]
	}
	for i, c := range repl {
		q = strings.Replace(q, treqsToken(i), c.qText, 1)
	}
	return q, true
}

// treqsToken is a placeholder with no letter or digit, so a later value
// never matches inside it.
func treqsToken(i int) string { return "\x00" + strings.Repeat("\x01", i+1) + "\x00" }

func (g *treqsGen) run(ctx context.Context, query string) (ehrResult, error) {
	ctx, cancel := context.WithTimeout(ctx, treqsQueryTimeout)
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
	distinct := map[string]bool{}
	for rows.Next() {
		dst := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range dst {
			ptrs[i] = &dst[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return ehrResult{}, err
		}
		for i, v := range dst {
			if b, ok := v.([]byte); ok {
				dst[i] = string(b)
			}
		}
		// Keep distinct rows only, in first-seen order.
		kb, err := json.Marshal(dst)
		if err != nil {
			return ehrResult{}, err
		}
		key := string(kb)
		if distinct[key] {
			continue
		}
		distinct[key] = true
		res.rows = append(res.rows, dst)
		if len(res.rows) > treqsMaxValues {
			break
		}
	}
	return res, rows.Err()
}

// treqsAns is an executed instance's answer.
type treqsAns struct {
	typ     schemas.AnswerType
	answer  string
	values  []string
	ordered bool
	shape   string // "scalar", "distinct" (list of distinct values) or "row" (one multi-column row)
}

// treqsAnswer turns a result (distinct rows) into an answer; ok is false
// when it is not well defined: empty, NULL, a zero count, several rows of
// several columns, or more than treqsMaxValues values.
func treqsAnswer(sel int, res ehrResult) (treqsAns, bool) {
	if len(res.rows) == 0 || len(res.rows) > treqsMaxValues {
		return treqsAns{}, false
	}
	for _, r := range res.rows {
		for _, v := range r {
			if v == nil || ehrValueText(v) == "" {
				return treqsAns{}, false
			}
		}
	}
	switch {
	case res.cols > 1:
		if len(res.rows) != 1 {
			return treqsAns{}, false
		}
		a := treqsAns{typ: schemas.AnswerList, ordered: true, shape: "row"}
		for _, v := range res.rows[0] {
			a.values = append(a.values, ehrValueText(v))
		}
		raw, err := treqsJSONList(res.rows[0])
		if err != nil {
			return treqsAns{}, false
		}
		a.answer = raw
		return a, true
	case len(res.rows) > 1:
		a := treqsAns{typ: schemas.AnswerList, shape: "distinct"}
		col := make([]any, len(res.rows))
		for i, r := range res.rows {
			col[i] = r[0]
			a.values = append(a.values, ehrValueText(r[0]))
		}
		raw, err := treqsJSONList(col)
		if err != nil {
			return treqsAns{}, false
		}
		a.answer = raw
		return a, true
	}
	v := res.rows[0][0]
	a := treqsAns{answer: ehrValueText(v), shape: "scalar"}
	a.values = []string{a.answer}
	switch x := v.(type) {
	case int64:
		if sel == 1 && x == 0 {
			return treqsAns{}, false
		}
		a.typ = schemas.AnswerInteger
	case float64:
		a.typ = schemas.AnswerNumber
	default:
		a.typ = schemas.AnswerString
	}
	return a, true
}

// treqsJSONList writes values as a JSON list (numbers as numbers).
func treqsJSONList(vals []any) (string, error) {
	rows := make([][]any, len(vals))
	for i, v := range vals {
		rows[i] = []any{v}
	}
	return ehrJSONList(rows)
}

// treqsCategory is the fine-grained category: aggregate × tables, e.g.
// "count:demographic+diagnoses".
func treqsCategory(f treqsFormat) string {
	names := make([]string, len(f.Table))
	for i, t := range f.Table {
		names[i] = strings.ToLower(tasks.TREQSSchema[t].Name)
	}
	return treqsAggs[f.Sel] + ":" + strings.Join(names, "+")
}

func treqsTask(row *treqsRow, question, wording, query string, a treqsAns) tasks.Task {
	truth := tasks.Truth{
		Type: a.typ, Answer: a.answer, Values: a.values, Ordered: a.ordered,
		Extra: map[string]string{"sql": query, "mimicsql_key": row.Key, "wording": wording},
	}
	if a.typ == schemas.AnswerNumber || a.typ == schemas.AnswerList {
		truth.Tolerance = treqsTolerance
	}
	return tasks.Task{
		View: schemas.TaskView{
			Dataset: tasks.TREQSDataset, Category: treqsCategory(row.Format), Question: question, AnswerType: a.typ,
			Resources: []string{tasks.TREQSDataset}, PermittedActions: append([]string(nil), tasks.EHRSQLActions...),
		},
		Truth:     truth,
		Reference: treqsReference(query, a),
	}
}

// treqsReference runs the SQL on treqs.db and prints the answer in the
// strict verifier's format for its shape.
func treqsReference(query string, a treqsAns) string {
	var lit bytes.Buffer
	enc := json.NewEncoder(&lit)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(query) // a JSON string is a valid Python string literal
	var out string
	switch {
	case a.shape == "row":
		out = "answer = list(rows[0])\nprint(json.dumps(answer))\n"
	case a.shape == "distinct":
		out = "answer = list(dict.fromkeys(r[0] for r in rows))\nprint(json.dumps(answer))\n"
	case a.typ == schemas.AnswerInteger:
		out = "answer = int(rows[0][0])\nprint(answer)\n"
	case a.typ == schemas.AnswerNumber:
		out = "answer = float(rows[0][0])\nprint(repr(answer))\n"
	default:
		out = "answer = str(rows[0][0])\nprint(answer)\n"
	}
	return "import json\nimport os\nimport sqlite3\n\n" +
		"DATA_DIR = os.environ.get(\"MEDGYM_DATA_DIR\", \"/data/" + tasks.TREQSDataset + "\")\n" +
		"SQL = " + strings.TrimSpace(lit.String()) + "\n\n" +
		"con = sqlite3.connect(\"file:\" + os.path.join(DATA_DIR, \"treqs.db\") + \"?mode=ro&immutable=1\", uri=True)\n" +
		"rows = con.execute(SQL).fetchall()\n" + out
}

// treqsInstruction is the dataset instruction in MedAgentGym's structure:
// role, objective, schema primer, numbered table list, data location.
func treqsInstruction() string {
	var b strings.Builder
	b.WriteString("You are a biomedical expert in handling EHR data and answer questions accordingly. ")
	b.WriteString("Your objective is to solve a coding problem with given EHR data, with the goal of finally giving a concrete answer to the question.\n")
	b.WriteString("Assume you have knowledge of several tables:\n")
	b.WriteString("Tables are linked by identifiers: SUBJECT_ID refers to a unique patient and HADM_ID to a unique " +
		"hospital admission. DEMOGRAPHIC has one row per admission (NAME is the patient's name, DIAGNOSIS the primary " +
		"disease, DAYS_STAY the days of hospital stay, EXPIRE_FLAG the death status). DIAGNOSES and PROCEDURES hold " +
		"ICD-9 codes with their short and long titles, PRESCRIPTIONS the drugs (FORMULARY_DRUG_CD is the drug code, " +
		"DRUG_DOSE the dose with its unit) and LAB the lab tests (LABEL is the test name, VALUE_UNIT the value with its " +
		"unit, FLAG abnormal/delta). Text values keep their original case.\n")
	for i, t := range tasks.TREQSSchema {
		fmt.Fprintf(&b, "(%d) %s: %s\n", i+1, t.Name, strings.Join(t.Cols, ", "))
	}
	b.WriteString("All the tables are saved in the data directory /data/treqs as CSV files named <TABLE>.csv " +
		"(header = the column names; use pandas to read them). The same data is also in the SQLite database " +
		"/data/treqs/treqs.db (read-only).\n")
	b.WriteString("Write Python code that computes the answer, store it in a variable named `answer`, and print it: " +
		"a single number or value for a scalar answer, and a Python list for several values (the distinct values, " +
		"or the requested fields in the order asked).")
	return b.String()
}

// treqsLicense heads LICENSE.md; the MIMICSQL MIT licence text follows.
const treqsLicense = `# Licences of the TREQS task set (treqs)

The generated task set under ` + "`<library>/treqs/`" + ` combines two sources with different licences.

## Database and CSV tables: Open Database License (ODbL) v1.0

` + "`treqs.db`" + ` and the five table CSVs (DEMOGRAPHIC, DIAGNOSES, LAB, PRESCRIPTIONS, PROCEDURES) are a
derived database built from the **MIMIC-III Clinical Database Demo v1.4** — Johnson, A., Pollard, T., &
Mark, R. (2019). PhysioNet. https://doi.org/10.13026/C2HM2Q — published under the Open Data Commons Open
Database License v1.0 (https://opendatacommons.org/licenses/odbl/1-0/). Please also cite Goldberger, A., et
al. (2000). PhysioBank, PhysioToolkit, and PhysioNet. Circulation 101(23), e215–e220. The derived database
is offered under the same licence (ODbL 1.0). Changes made by medgym: TREQS's 5-table layout (one
DEMOGRAPHIC row per admission, dictionaries joined in, dose/value and unit concatenated) and synthetic
patient names from TREQS's id2name table.

## Questions and SQL: MIT

The questions and SQL (` + "`train.jsonl`, `test.jsonl`" + `) are re-instantiated from MIMICSQL
(github.com/wangpinggl/TREQS, commit 1c3bda58): each question's logical form is reused with condition values
drawn from the demo database, and the question wording (template and natural) gets the new values. The
synthetic names come from the same repository. Cite:

Ping Wang, Tian Shi, and Chandan K. Reddy. 2020. Text-to-SQL Generation for Question Answering on Electronic
Medical Records. In Proceedings of The Web Conference 2020 (WWW '20), 350–361.
https://doi.org/10.1145/3366423.3380120

MIMICSQL's licence:
`
