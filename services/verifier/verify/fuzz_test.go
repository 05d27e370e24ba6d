package verify

import (
	"math"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// FuzzParsers feeds arbitrary text to every answer parser: none may panic,
// and a parsed number must be finite and survive a second parse of its
// canonical form.
func FuzzParsers(f *testing.F) {
	for _, s := range []string{
		"25.2", "-3e-5 kg", "1,234", "0x10", "nan", "1_000.5", " 7\n", "(4, 2)", "('4 weeks', '2 days')",
		"03/14/2021", "2021-03-14", "[(1,), (2,)]", `["a\u00e9", 'b\'c']`, "[np.int64(3)]", "a\nb", "[[[[", "\"",
		"1e400", "9" + string(rune(0xa0)), "true", "Yes",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := parseNumber(s); err == nil {
			if math.IsInf(v, 0) || math.IsNaN(v) {
				t.Fatalf("parseNumber(%q) = %v", s, v)
			}
			if w, err := parseNumber(fmtNum(v)); err != nil || w != v {
				t.Fatalf("parseNumber(%q) = %v, but its canonical form re-parses as %v, %v", s, v, w, err)
			}
		}
		_, _ = parsePlainNumber(s)
		_, _ = parseDate(s)
		_, _ = parseTuple(s)
		_, _ = parseBool(s)
		_, _ = parseList(s)
		_, _ = pyFloat(s)
		_, _ = pyInt(s)
		_ = lastLine(s)
		_ = normString(s)
		if c := clip(s); len(c) > maxAnswerBytes {
			t.Fatalf("clip gave %d bytes", len(c))
		}
	})
}

// FuzzCheck runs arbitrary output and truth through every mode, dataset and
// answer type: it must never panic and must always explain itself.
func FuzzCheck(f *testing.F) {
	f.Add("25.3\n", "", "25.238", 0)
	f.Add("10 rows", "Traceback", "1", 1)
	f.Add("[(1,), (2,)]", "", "[1, 2]", 0)
	f.Add("True", "", "false", 0)
	f.Add("(4, 2)", "", "('4 weeks', '2 days')", 0)
	f.Add("null\n", "", "null", 0)
	datasets := append(UpstreamDatasets(), "unknown")
	types := []schemas.AnswerType{"", schemas.AnswerNumber, schemas.AnswerInteger, schemas.AnswerDate,
		schemas.AnswerString, schemas.AnswerList, schemas.AnswerBoolean, schemas.AnswerTuple}
	f.Fuzz(func(t *testing.T, out, errOut, answer string, exit int) {
		status := schemas.StatusOK
		if exit != 0 {
			status = schemas.StatusError
		}
		res := schemas.ExecResult{Status: status, ExitCode: exit, Stdout: out, Stderr: errOut}
		for _, ty := range types {
			truth := tasks.Truth{Type: ty, Answer: answer, Extra: map[string]string{ExtraEstimateTarget: "size"}}
			if ty == schemas.AnswerList {
				truth.Values = []string{answer}
			}
			for _, ab := range [][2]bool{{false, false}, {true, false}, {true, true}} { // abstention offered, unanswerable
				truth.Abstention, truth.Unanswerable = ab[0], ab[1]
				for _, d := range datasets {
					for _, m := range []Mode{Strict, Upstream} {
						oc := checkOutput(m, d, truth, res)
						ac := CheckAnswer(m, d, truth, oc.Answer)
						for _, c := range []schemas.Check{oc, ac} {
							if c.Verdict == "" || c.VerifierVersion != VersionFor(m) {
								t.Fatalf("mode %s dataset %s type %s: bad check %+v", m, d, ty, c)
							}
						}
						if m == Strict && exit != 0 && oc.Accepted {
							t.Fatalf("strict accepted a run with exit code %d: %+v", exit, oc)
						}
						if truth.Unanswerable && oc.Accepted && !IsAbstention(oc.Answer) {
							t.Fatalf("an answer to an unanswerable question was accepted: %+v", oc)
						}
					}
				}
			}
		}
	})
}
