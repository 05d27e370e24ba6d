package verify

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Predictions tasks (AnswerPredictions): the agent writes a CSV file in its
// workspace; the sandbox returns it in ExecResult.Files and it is scored
// against the gold labels in Truth.Values ("id=label"). Truth.Extra keys:
// tasks.ExtraOutputFile, ExtraIDColumn, ExtraPredictionColumn,
// ExtraScoreColumn, ExtraPositiveLabel, ExtraMinAccuracy, ExtraMinAUROC.

// predMetrics is what scoring a predictions file found.
type predMetrics struct {
	file      string
	accuracy  float64
	correct   int
	total     int // strict: gold rows; upstream: predicted rows
	auroc     float64
	haveAUROC bool
}

// checkPredictions checks an execution's predictions file. accuracy is the
// mode's accuracy (0 when there is no file), the reward under
// Options.GradedML.
func checkPredictions(mode Mode, truth tasks.Truth, res schemas.ExecResult) (answer string, ok bool, verdict string, accuracy float64) {
	name := truth.Extra[tasks.ExtraOutputFile]
	if name == "" {
		name = "predictions.csv"
	}
	if mode == Upstream {
		return upstreamPredictions(truth, res, name)
	}
	if res.Status != schemas.StatusOK || res.ExitCode != 0 {
		return "", false, fmt.Sprintf("rejected: the run ended with status %q (exit code %d); strict mode accepts only a clean exit", res.Status, res.ExitCode), 0
	}
	data, found := res.Files[name]
	if !found {
		return "", false, fmt.Sprintf("rejected: the run did not write %s in the working directory", name), 0
	}
	m, err := strictPredictions(truth, data)
	if err != nil {
		return name, false, fmt.Sprintf("rejected: %s: %v", name, err), 0
	}
	m.file = name
	ok, verdict = predVerdict(truth, m)
	return m.summary(), ok, verdict, m.accuracy
}

func (m predMetrics) summary() string {
	s := fmt.Sprintf("%s: accuracy %s (%d/%d)", m.file, fmtMetric(m.accuracy), m.correct, m.total)
	if m.haveAUROC {
		s += ", AUROC " + fmtMetric(m.auroc)
	}
	return s
}

func fmtMetric(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// predVerdict applies the thresholds.
func predVerdict(truth tasks.Truth, m predMetrics) (bool, string) {
	minAcc, err := strconv.ParseFloat(truth.Extra[tasks.ExtraMinAccuracy], 64)
	if err != nil {
		return false, fmt.Sprintf("rejected: the task's truth has no valid %s (%q)", tasks.ExtraMinAccuracy, truth.Extra[tasks.ExtraMinAccuracy])
	}
	ok := m.accuracy >= minAcc
	cmp := func(pass bool) string {
		if pass {
			return "≥"
		}
		return "<"
	}
	parts := []string{fmt.Sprintf("accuracy %s (%d of %d gold rows) %s %s", fmtMetric(m.accuracy), m.correct, m.total, cmp(m.accuracy >= minAcc), fmtMetric(minAcc))}
	if s := truth.Extra[tasks.ExtraMinAUROC]; s != "" {
		minAUC, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return false, fmt.Sprintf("rejected: the task's truth has an invalid %s (%q)", tasks.ExtraMinAUROC, s)
		}
		switch {
		case truth.Extra[tasks.ExtraScoreColumn] == "":
			return false, "rejected: the task's truth sets min_auroc but no score column"
		case !m.haveAUROC:
			ok = false
			parts = append(parts, fmt.Sprintf("AUROC missing: no %q column (required: AUROC ≥ %s)", truth.Extra[tasks.ExtraScoreColumn], fmtMetric(minAUC)))
		default:
			ok = ok && m.auroc >= minAUC
			parts = append(parts, fmt.Sprintf("AUROC %s %s %s", fmtMetric(m.auroc), cmp(m.auroc >= minAUC), fmtMetric(minAUC)))
		}
	} else if m.haveAUROC {
		parts = append(parts, "AUROC "+fmtMetric(m.auroc)+" (not required)")
	}
	if ok {
		return true, "accepted: " + strings.Join(parts, "; ")
	}
	return false, "rejected: " + strings.Join(parts, "; ")
}

// goldLabels parses Truth.Values ("id=label") into normalised ids, in order.
func goldLabels(truth tasks.Truth) (ids []string, labels map[string]string, err error) {
	labels = make(map[string]string, len(truth.Values))
	for _, v := range truth.Values {
		id, label, found := strings.Cut(v, "=")
		if !found {
			return nil, nil, fmt.Errorf("gold value %q is not id=label", v)
		}
		id = normID(id)
		if _, dup := labels[id]; dup {
			return nil, nil, fmt.Errorf("gold id %q appears twice", id)
		}
		labels[id] = label
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, nil, errors.New("no gold labels")
	}
	return ids, labels, nil
}

// predTable is a parsed predictions file: rows in file order.
type predTable struct {
	ids, preds, scores []string
	hasScore           bool
}

// readPredTable parses a CSV with a header naming the id and prediction
// columns (and the score column, when the truth has one). Column names are
// matched after trimming, case-insensitively; a UTF-8 BOM is ignored.
func readPredTable(truth tasks.Truth, data string) (predTable, error) {
	var t predTable
	idCol, predCol := truth.Extra[tasks.ExtraIDColumn], truth.Extra[tasks.ExtraPredictionColumn]
	if idCol == "" || predCol == "" {
		return t, fmt.Errorf("the task's truth names no %s/%s", tasks.ExtraIDColumn, tasks.ExtraPredictionColumn)
	}
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix([]byte(data), []byte("\ufeff"))))
	r.FieldsPerRecord = -1
	r.ReuseRecord = false
	rows, err := r.ReadAll()
	if err != nil {
		return t, fmt.Errorf("not a valid CSV file: %w", err)
	}
	if len(rows) == 0 {
		return t, errors.New("the file is empty (want a header row)")
	}
	col := func(name string) int {
		for i, h := range rows[0] {
			if strings.EqualFold(strings.TrimSpace(h), name) {
				return i
			}
		}
		return -1
	}
	ic, pc, sc := col(idCol), col(predCol), -1
	if ic < 0 || pc < 0 {
		return t, fmt.Errorf("the header %q lacks the columns %q and %q", strings.Join(rows[0], ","), idCol, predCol)
	}
	if s := truth.Extra[tasks.ExtraScoreColumn]; s != "" {
		sc = col(s)
	}
	t.hasScore = sc >= 0
	field := func(row []string, i int) string {
		if i < 0 || i >= len(row) {
			return ""
		}
		return strings.TrimSpace(row[i])
	}
	for _, row := range rows[1:] {
		if len(row) == 1 && strings.TrimSpace(row[0]) == "" {
			continue
		}
		t.ids = append(t.ids, normID(field(row, ic)))
		t.preds = append(t.preds, field(row, pc))
		t.scores = append(t.scores, field(row, sc))
	}
	return t, nil
}

// strictPredictions scores a file over every gold row: a gold id with no
// prediction, or an unparsable one, counts as wrong; ids not in the gold set
// are ignored; for an id given twice the first row counts.
func strictPredictions(truth tasks.Truth, data string) (predMetrics, error) {
	var m predMetrics
	ids, gold, err := goldLabels(truth)
	if err != nil {
		return m, fmt.Errorf("the task's truth: %w", err)
	}
	t, err := readPredTable(truth, data)
	if err != nil {
		return m, err
	}
	pred := make(map[string]int, len(t.ids)) // id → first row
	for i, id := range t.ids {
		if _, seen := pred[id]; !seen {
			pred[id] = i
		}
	}
	m.total = len(ids)
	for _, id := range ids {
		if i, found := pred[id]; found && labelEqual(t.preds[i], gold[id]) {
			m.correct++
		}
	}
	m.accuracy = float64(m.correct) / float64(m.total)
	if t.hasScore {
		pos := truth.Extra[tasks.ExtraPositiveLabel]
		if pos == "" {
			pos = "1"
		}
		var (
			posScores, negScores []float64
			nPos, nNeg           int
		)
		for _, id := range ids {
			isPos := labelEqual(gold[id], pos)
			if isPos {
				nPos++
			} else {
				nNeg++
			}
			i, found := pred[id]
			if !found {
				continue
			}
			s, err := strconv.ParseFloat(t.scores[i], 64)
			if err != nil || math.IsNaN(s) {
				continue
			}
			if isPos {
				posScores = append(posScores, s)
			} else {
				negScores = append(negScores, s)
			}
		}
		if nPos > 0 && nNeg > 0 {
			m.auroc, m.haveAUROC = auroc(posScores, negScores, nPos, nNeg), true
		}
	}
	return m, nil
}

// auroc is the Mann-Whitney form: the share of (positive, negative) gold
// pairs whose positive scores higher, ties counting 0.5. Pairs where either
// score is missing count 0 (nPos, nNeg include the missing ones).
func auroc(pos, neg []float64, nPos, nNeg int) float64 {
	sorted := append([]float64(nil), neg...)
	sort.Float64s(sorted)
	var sum float64
	for _, p := range pos {
		lo := sort.SearchFloat64s(sorted, p)                                      // negatives < p
		hi := sort.Search(len(sorted), func(i int) bool { return sorted[i] > p }) // negatives ≤ p
		sum += float64(lo) + 0.5*float64(hi-lo)
	}
	return sum / (float64(nPos) * float64(nNeg))
}

// labelEqual compares a predicted label with a gold one: True/False read as
// 1/0, numbers numerically (1 = 1.0), else normalised strings.
func labelEqual(got, want string) bool {
	g, w := boolAsNum(got), boolAsNum(want)
	gv, gerr := parsePlainNumber(g)
	wv, werr := parsePlainNumber(w)
	if gerr == nil && werr == nil {
		return gv == wv
	}
	return g != "" && normString(g) == normString(w)
}

func boolAsNum(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true":
		return "1"
	case "false":
		return "0"
	}
	return strings.TrimSpace(s)
}

// normID trims an id and writes an integral number without a fraction
// ("12.0" → "12"), as pandas writes ids of a float column.
func normID(s string) string {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseFloat(s, 64); err == nil && v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return strconv.FormatInt(int64(v), 10)
	}
	return s
}

// upstreamPredictions is EHRSHOT's validate (MIMIC-Extract's for mortality
// and LOS): on a clean run with the file present the episode is done
// (accepted) and its reward is the accuracy over the *predicted* rows:
// unknown ids count wrong, gold rows without a prediction are not counted.
// A label compares as int(pred) == int(gold) after True/False → 1/0; an
// evaluation error (no rows, a non-numeric label) is done with accuracy 0.
// No file: not done.
func upstreamPredictions(truth tasks.Truth, res schemas.ExecResult, name string) (string, bool, string, float64) {
	if res.Status != schemas.StatusOK || res.ExitCode != 0 {
		return "", false, "rejected (upstream): the run did not succeed", 0
	}
	data, found := res.Files[name]
	if !found {
		return "", false, fmt.Sprintf("rejected (upstream): %s does not exist", name), 0
	}
	m, err := upstreamAccuracy(truth, data)
	if err != nil {
		return name, true, fmt.Sprintf("accepted (upstream): %s exists; evaluation failed (%v), accuracy 0", name, err), 0
	}
	m.file = name
	return m.summary(), true, fmt.Sprintf("accepted (upstream): %s exists; accuracy %s over %d predicted rows (%d correct)",
		name, fmtMetric(m.accuracy), m.total, m.correct), m.accuracy
}

func upstreamAccuracy(truth tasks.Truth, data string) (predMetrics, error) {
	var m predMetrics
	_, gold, err := goldLabels(truth)
	if err != nil {
		return m, err
	}
	t, err := readPredTable(truth, data)
	if err != nil {
		return m, err
	}
	if len(t.ids) == 0 {
		return m, errors.New("division by zero: no predicted rows")
	}
	for i, id := range t.ids {
		p, err := pyIntLabel(t.preds[i])
		if err != nil {
			return m, err
		}
		g, found := gold[id]
		if !found {
			continue
		}
		gv, err := pyIntLabel(g)
		if err != nil {
			return m, err
		}
		if p == gv {
			m.correct++
		}
	}
	m.total = len(t.ids)
	m.accuracy = float64(m.correct) / float64(m.total)
	return m, nil
}

// pyIntLabel is int() of a label pandas read: True/False → 1/0, floats
// truncated toward zero.
func pyIntLabel(s string) (int64, error) {
	v, err := strconv.ParseFloat(boolAsNum(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("int(%q): invalid literal", s)
	}
	return int64(math.Trunc(v)), nil
}
