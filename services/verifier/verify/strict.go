package verify

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Strict rules: medgym's default. The answer comes from stdout only, a run
// that did not exit cleanly is never accepted, and values are compared by
// type (see doc.go for the accepted formats).

// Default numeric tolerance when a truth has neither bounds nor a Tolerance.
const (
	defaultRelTol = 1e-6
	absTol        = 1e-9
)

// strictOutput checks one execution under the strict rules.
func strictOutput(truth tasks.Truth, res schemas.ExecResult) (answer string, ok bool, verdict string) {
	if res.Status != schemas.StatusOK || res.ExitCode != 0 {
		return "", false, fmt.Sprintf("rejected: the run ended with status %q (exit code %d); strict mode accepts only a clean exit", res.Status, res.ExitCode)
	}
	if truth.Type == schemas.AnswerOutput {
		return checkProgramOutput(truth, res)
	}
	return strictText(truth, res.Stdout, "stdout (stderr is never read)")
}

// checkProgramOutput is the strict rule of an output task (BioCoder): the
// agent's function ran inside the task's harness; its whole stdout must
// equal the reference solution's, run the same way (line ends and trailing
// white space at the end aside). A reference that failed or printed
// nothing cannot tell a right function from a silent one, so nothing is
// accepted against it.
func checkProgramOutput(truth tasks.Truth, res schemas.ExecResult) (answer string, ok bool, verdict string) {
	switch truth.Extra["reference_output"] {
	case "missing":
		return "", false, "rejected: this task has no reference output yet; run `medgym tasks reference-outputs --tasks-dir DIR` to compute it"
	case "failed":
		return "", false, "rejected: the task's reference solution does not run cleanly in the sandbox, so no output can be checked against it"
	}
	norm := func(s string) string { return strings.TrimRight(strings.ReplaceAll(s, "\r\n", "\n"), " \t\n") }
	want, got := norm(truth.Answer), norm(res.Stdout)
	if want == "" {
		return got, false, "rejected: the reference solution prints nothing, so a silent program cannot be told from a right one"
	}
	if res.Truncated {
		return got, false, "rejected: the output was truncated"
	}
	if got == want {
		return got, true, fmt.Sprintf("accepted: the program's output equals the reference output (%d lines)", strings.Count(want, "\n")+1)
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gl), len(wl)) {
		g, w := "<none>", "<none>"
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			return got, false, fmt.Sprintf("rejected: output line %d is %q, the reference prints %q", i+1, clipLine(g), clipLine(w))
		}
	}
	return got, false, "rejected: the output differs from the reference output"
}

func clipLine(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// strictText extracts the answer from text (stdout or an explicit answer)
// and checks it.
func strictText(truth tasks.Truth, text, what string) (answer string, ok bool, verdict string) {
	if truth.Type == schemas.AnswerOutput {
		return "", false, "rejected: this task is scored from its program's output, not from an answer text"
	}
	if truth.Abstention {
		// An abstention is final either way, so that whether an episode
		// ends on it never tells the agent whether the question is
		// answerable; Score tells the two apart (abstentionOutcome).
		if a := lastLine(text); IsAbstention(a) {
			if truth.Unanswerable {
				return a, true, "accepted: abstained on a question the data cannot answer"
			}
			return a, true, "accepted as final: abstained on a question the data answers (scored abstained_wrongly)"
		}
		if truth.Unanswerable {
			if a := lastLine(text); a != "" {
				return a, false, fmt.Sprintf("rejected: %q answers a question the data cannot answer (abstain with %q)", a, schemas.AbstainAnswer)
			}
			return "", false, "rejected: nothing on " + what
		}
	}
	if answerType(truth) == schemas.AnswerList {
		answer = strings.TrimSpace(text)
	} else {
		answer = lastLine(text)
	}
	if answer == "" {
		return "", false, "rejected: nothing on " + what
	}
	ok, verdict = strictValue(truth, answer)
	return answer, ok, verdict
}

// IsAbstention reports whether an extracted answer is the reserved
// abstention answer (schemas.AbstainAnswer, any case). It counts only on
// tasks that offer abstention (tasks.Truth.Abstention).
func IsAbstention(answer string) bool {
	return strings.EqualFold(strings.TrimSpace(answer), schemas.AbstainAnswer)
}

// answerType is truth.Type, or when empty: list if Values are set, number if
// the answer is a plain number, else string.
func answerType(truth tasks.Truth) schemas.AnswerType {
	switch {
	case truth.Type != "":
		return truth.Type
	case len(truth.Values) > 0:
		return schemas.AnswerList
	}
	if _, err := parsePlainNumber(truth.Answer); err == nil {
		return schemas.AnswerNumber
	}
	return schemas.AnswerString
}

// strictValue compares an extracted answer with the truth.
func strictValue(truth tasks.Truth, got string) (bool, string) {
	switch t := answerType(truth); t {
	case schemas.AnswerNumber:
		return checkNumber(truth, got)
	case schemas.AnswerInteger:
		return checkInteger(truth, got)
	case schemas.AnswerDate:
		return checkDate(truth, got)
	case schemas.AnswerTuple:
		return checkTuple(truth, got)
	case schemas.AnswerBoolean:
		return checkBool(truth, got)
	case schemas.AnswerString:
		if normString(got) == normString(truth.Answer) {
			return true, fmt.Sprintf("accepted: %q matches %q (case and spacing ignored)", got, truth.Answer)
		}
		return false, fmt.Sprintf("rejected: %q does not match %q", got, truth.Answer)
	case schemas.AnswerList:
		return checkList(truth, got)
	default:
		return false, fmt.Sprintf("rejected: unknown answer type %q in the task's truth", t)
	}
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func relTol(truth tasks.Truth) float64 {
	if truth.Tolerance > 0 {
		return truth.Tolerance
	}
	return defaultRelTol
}

// closeEnough reports |got-want| ≤ rel·|want| + 1e-9.
func closeEnough(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)+absTol
}

// noiseTol is the relative difference a Decimals comparison ignores: float
// noise, far below any rounded decimal.
const noiseTol = 1e-12

// numRule is how a truth compares numbers: rounded to Decimals (both
// sides, as Python's round and str print them) or within a relative
// tolerance.
type numRule struct {
	decimals int
	rel      float64
}

func numRuleOf(truth tasks.Truth) numRule {
	return numRule{decimals: truth.Decimals, rel: relTol(truth)}
}

func (r numRule) equal(got, want float64) bool {
	if r.decimals > 0 {
		// Float noise around a rounding tie (2314.3225000000016 printed
		// for a stored 2314.3225) must not flip the verdict.
		return roundDecimals(got, r.decimals) == roundDecimals(want, r.decimals) || closeEnough(got, want, noiseTol)
	}
	return closeEnough(got, want, r.rel)
}

func (r numRule) String() string {
	if r.decimals > 0 {
		return fmt.Sprintf("rounded to %d decimals", r.decimals)
	}
	return "relative tolerance " + fmtNum(r.rel)
}

// roundDecimals is v rounded to d decimals, correctly (the exact binary
// value, ties to even, as Python's round), with -0 as 0.
func roundDecimals(v float64, d int) string {
	s := strconv.FormatFloat(v, 'f', d, 64)
	if strings.TrimLeft(s, "-0.") == "" {
		return strings.TrimPrefix(s, "-")
	}
	return s
}

func checkNumber(truth tasks.Truth, got string) (bool, string) {
	v, err := parseNumber(got)
	if err != nil {
		return false, "rejected: " + err.Error()
	}
	if truth.Lower != nil || truth.Upper != nil {
		lo, hi := math.Inf(-1), math.Inf(1)
		if truth.Lower != nil {
			lo = *truth.Lower
		}
		if truth.Upper != nil {
			hi = *truth.Upper
		}
		if lo <= v && v <= hi {
			return true, fmt.Sprintf("accepted: %s is within [%s, %s]", fmtNum(v), fmtNum(lo), fmtNum(hi))
		}
		return false, fmt.Sprintf("rejected: %s is outside [%s, %s]", fmtNum(v), fmtNum(lo), fmtNum(hi))
	}
	want, err := parseNumber(truth.Answer)
	if err != nil {
		return false, "rejected: the task's truth is not a number: " + err.Error()
	}
	rule := numRuleOf(truth)
	if rule.equal(v, want) {
		return true, fmt.Sprintf("accepted: %s equals %s (%s)", fmtNum(v), fmtNum(want), rule)
	}
	return false, fmt.Sprintf("rejected: %s differs from %s (%s)", fmtNum(v), fmtNum(want), rule)
}

// checkInteger applies MedCalc-Bench's rule round(answer) == truth, with
// Python's round (half to even).
func checkInteger(truth tasks.Truth, got string) (bool, string) {
	v, err := parseNumber(got)
	if err != nil {
		return false, "rejected: " + err.Error()
	}
	want, err := parseNumber(truth.Answer)
	if err != nil {
		return false, "rejected: the task's truth is not a number: " + err.Error()
	}
	r := math.RoundToEven(v)
	if r == want {
		return true, fmt.Sprintf("accepted: round(%s) = %s equals %s", fmtNum(v), fmtNum(r), fmtNum(want))
	}
	return false, fmt.Sprintf("rejected: round(%s) = %s differs from %s", fmtNum(v), fmtNum(r), fmtNum(want))
}

func checkDate(truth tasks.Truth, got string) (bool, string) {
	d, err := parseDate(got)
	if err != nil {
		return false, "rejected: " + err.Error()
	}
	want, err := parseDate(truth.Answer)
	if err != nil {
		return false, "rejected: the task's truth is not a date: " + err.Error()
	}
	if d.Equal(want) {
		return true, fmt.Sprintf("accepted: %s is %s", got, want.Format("01/02/2006"))
	}
	return false, fmt.Sprintf("rejected: %s is not %s", d.Format("01/02/2006"), want.Format("01/02/2006"))
}

func checkTuple(truth tasks.Truth, got string) (bool, string) {
	g, err := parseTuple(got)
	if err != nil {
		return false, "rejected: " + err.Error()
	}
	want, err := parseTuple(truth.Answer)
	if err != nil {
		return false, "rejected: the task's truth is not a (weeks, days) pair: " + err.Error()
	}
	if g == want {
		return true, fmt.Sprintf("accepted: (%d weeks, %d days)", g.weeks, g.days)
	}
	return false, fmt.Sprintf("rejected: (%d weeks, %d days) is not (%d weeks, %d days)", g.weeks, g.days, want.weeks, want.days)
}

func checkBool(truth tasks.Truth, got string) (bool, string) {
	g, err := parseBool(got)
	if err != nil {
		return false, "rejected: " + err.Error()
	}
	want, err := parseBool(truth.Answer)
	if err != nil {
		return false, "rejected: the task's truth is not a boolean: " + err.Error()
	}
	if g == want {
		return true, fmt.Sprintf("accepted: %t", g)
	}
	return false, fmt.Sprintf("rejected: %t is not %t", g, want)
}

func checkList(truth tasks.Truth, got string) (bool, string) {
	gold := truth.Values
	if len(gold) == 0 {
		var err error
		if gold, err = parseList(truth.Answer); err != nil {
			return false, "rejected: the task's truth is not a list: " + err.Error()
		}
	}
	pred, err := parseList(got)
	if err != nil {
		return false, "rejected: " + err.Error()
	}
	if len(pred) != len(gold) {
		return false, fmt.Sprintf("rejected: %d values, want %d", len(pred), len(gold))
	}
	rule := numRuleOf(truth)
	if truth.Ordered {
		for i := range gold {
			if !elemEqual(pred[i], gold[i], rule) {
				return false, fmt.Sprintf("rejected: value %d is %q, want %q (order matters)", i+1, pred[i], gold[i])
			}
		}
		return true, fmt.Sprintf("accepted: all %d values match in order", len(gold))
	}
	// Sorting both sides puts matching elements at the same index: numbers
	// first by value, then normalised strings. For a tolerance this small the
	// sorted pairing finds a match whenever one exists.
	ps, gs := sortedElems(pred), sortedElems(gold)
	for i := range gs {
		if !elemEqual(ps[i], gs[i], rule) {
			return false, fmt.Sprintf("rejected: values differ as a multiset (first difference: %q vs %q)", ps[i], gs[i])
		}
	}
	return true, fmt.Sprintf("accepted: all %d values match (any order)", len(gold))
}

// elemEqual compares list elements: numerically when both are plain
// numbers, else as normalised strings.
func elemEqual(got, want string, rule numRule) bool {
	g, gerr := parsePlainNumber(got)
	w, werr := parsePlainNumber(want)
	if gerr == nil && werr == nil {
		return rule.equal(g, w)
	}
	return normString(got) == normString(want)
}

func sortedElems(in []string) []string {
	type key struct {
		num   bool
		v     float64
		s, rw string
	}
	keys := make([]key, len(in))
	for i, s := range in {
		v, err := parsePlainNumber(s)
		keys[i] = key{num: err == nil, v: v, s: normString(s), rw: s}
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		switch {
		case a.num && !b.num:
			return -1
		case !a.num && b.num:
			return 1
		case a.num:
			if a.v < b.v {
				return -1
			}
			if a.v > b.v {
				return 1
			}
			return 0
		}
		return strings.Compare(a.s, b.s)
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.rw
	}
	return out
}
