package verify

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Upstream-compat rules: MedAgentGym's validate() per dataset (snapshot
// e1e639e, see shared/notes/upstream.md §4), bugs included. Do not fix
// anything here: these rules exist to reproduce upstream's numbers.

// ExtraUpstreamRule is the Truth.Extra key that names the upstream rule for
// a dataset whose name is not itself a rule name (e.g. "treqs" for a
// TREQS-style dataset under another name).
const ExtraUpstreamRule = "upstream_rule"

// ExtraEstimateTarget is the Truth.Extra key of N-PowerAI's estimate_target
// ("size" or "power").
const ExtraEstimateTarget = "estimate_target"

// upstreamRule checks upstream's env_message; success is upstream's
// status == "SUCCESS".
type upstreamRule func(truth tasks.Truth, msg string, success bool) (bool, string)

// upstreamRules maps a dataset (upstream task key) to its rule.
var upstreamRules = map[string]upstreamRule{
	"medcalcbench": medcalcUpstream,
	"mimic_iii":    ehrsqlUpstream,
	"eicu":         ehrsqlUpstream,
	"treqs":        ehrsqlUpstream,
	"npowerai":     npoweraiUpstream,
	"ehr_seqsql":   seqsqlUpstream,
	"ehrcon":       ehrconUpstream,
	"biodsbench":   biodsbenchUpstream,
	"biocoder":     biocoderUpstream,
}

// UpstreamDatasets lists the datasets that have an upstream-compat rule.
func UpstreamDatasets() []string {
	out := make([]string, 0, len(upstreamRules))
	for k := range upstreamRules {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func lookupRule(dataset string, truth tasks.Truth) (string, upstreamRule) {
	name := dataset
	if n := truth.Extra[ExtraUpstreamRule]; n != "" {
		name = n
	}
	return name, upstreamRules[name]
}

// envMessage rebuilds upstream's env_message and SUCCESS flag from a run:
// stdout + ("\n" + stderr if any stderr); on failure every "^" is removed
// (upstream's parse_and_truncate_error). A timeout has no output upstream,
// only "Process timed out after X.XXs (timeout limit: 120s)".
func envMessage(res schemas.ExecResult) (string, bool) {
	stdout, stderr := res.Stdout, res.Stderr
	if res.Status == schemas.StatusTimeout {
		stdout = ""
		stderr = fmt.Sprintf("Process timed out after %.2fs (timeout limit: 120s)", float64(res.DurationMS)/1000)
	}
	msg := stdout
	if stderr != "" {
		msg += "\n" + stderr
	}
	success := res.Status == schemas.StatusOK && res.ExitCode == 0
	if !success {
		msg = strings.ReplaceAll(msg, "^", "")
	}
	return msg, success
}

// medcalcUpstream: float(answer) >= 0.95*float(pred) or float(answer) <=
// 1.05*float(pred). The "or" makes any float pred pass (except nan); a date
// truth or a non-float env_message fails.
func medcalcUpstream(truth tasks.Truth, msg string, _ bool) (bool, string) {
	a, err := pyFloat(truth.Answer)
	if err != nil {
		return false, "rejected (upstream): float(answer): " + err.Error()
	}
	p, err := pyFloat(msg)
	if err != nil {
		return false, "rejected (upstream): float(pred): " + err.Error()
	}
	if a >= p*0.95 || a <= p*1.05 {
		return true, fmt.Sprintf("accepted (upstream): %s >= 0.95*%s or %s <= 1.05*%s", fmtNum(a), fmtNum(p), fmtNum(a), fmtNum(p))
	}
	return false, fmt.Sprintf("rejected (upstream): %s is neither >= 0.95*%s nor <= 1.05*%s", fmtNum(a), fmtNum(p), fmtNum(p))
}

// ehrsqlUpstream is MIMIC-III/eICU/TREQS: first gold value only, raw
// substring (old_flag), then True/False/None normalisation, ", " split and
// a trailing ".0" strip (new_flag).
func ehrsqlUpstream(truth tasks.Truth, pred string, _ bool) (bool, string) {
	ans := truth.Answer
	if len(truth.Values) > 0 {
		ans = truth.Values[0]
	}
	oldFlag := strings.Contains(pred, ans)
	if strings.Contains(pred, "True") {
		pred = strings.ReplaceAll(pred, "True", "1")
	} else {
		pred = strings.ReplaceAll(pred, "False", "0")
	}
	switch ans {
	case "False", "false", "None", "none":
		ans = "0"
	case "True", "true":
		ans = "1"
	}
	var parts []string
	if strings.Contains(ans, ", ") {
		// Upstream's ".0" strip then looks at a list and never matches.
		parts = strings.Split(ans, ", ")
	} else {
		parts = []string{strings.TrimSuffix(ans, ".0")}
	}
	newFlag := true
	for _, p := range parts {
		if !strings.Contains(pred, p) {
			newFlag = false
			break
		}
	}
	if oldFlag || newFlag {
		return true, fmt.Sprintf("accepted (upstream): %q occurs in the output", ans)
	}
	return false, fmt.Sprintf("rejected (upstream): %q does not occur in the output", ans)
}

// npoweraiUpstream: pred = env_message.strip(); size: int(pred) == answer;
// anything else is power: 0.99*answer < float(pred) < 1.01*answer.
func npoweraiUpstream(truth tasks.Truth, msg string, _ bool) (bool, string) {
	a, err := pyFloat(truth.Answer)
	if err != nil {
		return false, "rejected (upstream): the task's truth is not a number: " + err.Error()
	}
	if truth.Extra[ExtraEstimateTarget] == "size" {
		n, err := pyInt(msg)
		if err != nil {
			return false, "rejected (upstream): the answer of size should be able to convert to an integer: " + err.Error()
		}
		if !math.IsNaN(a) && !math.IsInf(a, 0) && new(big.Float).SetInt(n).Cmp(big.NewFloat(a)) == 0 {
			return true, fmt.Sprintf("accepted (upstream): size %s == %s", n, fmtNum(a))
		}
		return false, fmt.Sprintf("rejected (upstream): size %s != %s", n, fmtNum(a))
	}
	p, err := pyFloat(msg)
	if err != nil {
		return false, "rejected (upstream): the answer of power should be able to convert to a float: " + err.Error()
	}
	if p > a*0.99 && p < a*1.01 {
		return true, fmt.Sprintf("accepted (upstream): power %s within (%s, %s)", fmtNum(p), fmtNum(a*0.99), fmtNum(a*1.01))
	}
	return false, fmt.Sprintf("rejected (upstream): power %s outside (%s, %s)", fmtNum(p), fmtNum(a*0.99), fmtNum(a*1.01))
}

// seqsqlUpstream: correctness = True; the list re-check never runs because
// env_message is a string. Any execution passes, crashed or not.
func seqsqlUpstream(tasks.Truth, string, bool) (bool, string) {
	return true, "accepted (upstream): EHR-SeqSQL accepts every execution"
}

// ehrconUpstream: "true" in lower(pred) → True, elif "false" → False, else
// the string itself (never equal to a bool); success iff equal to Has error.
func ehrconUpstream(truth tasks.Truth, msg string, _ bool) (bool, string) {
	want, err := parseBool(truth.Answer)
	if err != nil {
		return false, "rejected (upstream): the task's truth is not a boolean: " + err.Error()
	}
	low := strings.ToLower(msg)
	var got bool
	switch {
	case strings.Contains(low, "true"):
		got = true
	case strings.Contains(low, "false"):
		got = false
	default:
		return false, "rejected (upstream): the output contains neither \"true\" nor \"false\""
	}
	if got == want {
		return true, fmt.Sprintf("accepted (upstream): output read as %t", got)
	}
	return false, fmt.Sprintf("rejected (upstream): output read as %t, want %t", got, want)
}

// biodsbenchUpstream: status == "SUCCESS"; the test cases are never run.
func biodsbenchUpstream(_ tasks.Truth, _ string, success bool) (bool, string) {
	if success {
		return true, "accepted (upstream): the program exited cleanly (test cases are never run)"
	}
	return false, "rejected (upstream): the program did not exit cleanly"
}

// biocoderUpstream: env_message == ground truth (the reference program's
// env_message, in Truth.Answer), exact.
func biocoderUpstream(truth tasks.Truth, msg string, _ bool) (bool, string) {
	want := truth.Answer
	if m, ok := truth.Extra["reference_message"]; ok {
		want = m // the reference run's env_message, as upstream computes its ground truth
	}
	if msg == want {
		return true, "accepted (upstream): output equals the reference output"
	}
	return false, "rejected (upstream): output differs from the reference output"
}

// pyStrip trims what Python's str.strip() and float() trim: Unicode white
// space plus the ASCII separators \x1c-\x1f.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return (r >= 0x1c && r <= 0x1f) || unicode.IsSpace(r)
	})
}

// pyFloat is Python's float(str) for ASCII input: surrounding white space,
// an optional sign, inf/infinity/nan in any case, or a decimal literal with
// single underscores between digits. Overflow gives ±inf, as in Python.
func pyFloat(s string) (float64, error) {
	t := pyStrip(s)
	body := strings.TrimLeft(t, "+-")
	if len(t)-len(body) > 1 {
		return 0, fmt.Errorf("could not convert string to float: %q", s)
	}
	switch strings.ToLower(body) {
	case "inf", "infinity":
		if strings.HasPrefix(t, "-") {
			return math.Inf(-1), nil
		}
		return math.Inf(1), nil
	case "nan":
		return math.NaN(), nil
	}
	if !pyDecimal(body) {
		return 0, fmt.Errorf("could not convert string to float: %q", s)
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(t, "_", ""), 64)
	if err != nil && !isRangeErr(err) {
		return 0, fmt.Errorf("could not convert string to float: %q", s)
	}
	return v, nil
}

func isRangeErr(err error) bool { return errors.Is(err, strconv.ErrRange) }

// pyDecimal matches Python's float literal without sign:
// (digitpart "." [digitpart] | "." digitpart | digitpart) [exponent].
func pyDecimal(s string) bool {
	i, intDigits := pyDigitPart(s, 0)
	frac := 0
	if i < len(s) && s[i] == '.' {
		i, frac = pyDigitPart(s, i+1)
	}
	if intDigits == 0 && frac == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		var exp int
		if i, exp = pyDigitPart(s, i); exp == 0 {
			return false
		}
	}
	return i == len(s)
}

// pyDigitPart reads digit (["_"] digit)* from s[i:]; it returns the end and
// the digit count (0 when there is no digit part).
func pyDigitPart(s string, i int) (int, int) {
	n := 0
	for i < len(s) {
		switch {
		case isDigit(s[i]):
			i++
			n++
		case s[i] == '_' && n > 0 && i+1 < len(s) && isDigit(s[i+1]):
			i++
		default:
			return i, n
		}
	}
	return i, n
}

// pyIntMaxDigits is Python's default int_max_str_digits: longer strings
// raise ValueError.
const pyIntMaxDigits = 4300

// pyInt is Python's int(str) in base 10: white space, an optional sign,
// digits with single underscores between them, at most 4300 digits.
func pyInt(s string) (*big.Int, error) {
	t := pyStrip(s)
	body := strings.TrimLeft(t, "+-")
	end, n := pyDigitPart(body, 0)
	if len(t)-len(body) > 1 || n == 0 || end != len(body) || n > pyIntMaxDigits {
		return nil, fmt.Errorf("invalid literal for int() with base 10: %q", s)
	}
	v, ok := new(big.Int).SetString(strings.ReplaceAll(t, "_", ""), 10)
	if !ok {
		return nil, fmt.Errorf("invalid literal for int() with base 10: %q", s)
	}
	return v, nil
}
