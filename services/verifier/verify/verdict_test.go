package verify

import (
	"slices"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// TestVerdictNeverHoldsTheGold checks the verdict shown to the agent
// (show_verdict) for every answer type, in both modes and under every
// upstream rule, on wrong, unreadable, empty, crashing and correct runs: it
// must not contain the gold value. The detailed verdict of the same wrong
// run does contain it (the positive control: the search finds gold where it
// is).
func TestVerdictNeverHoldsTheGold(t *testing.T) {
	t.Parallel()
	lo, hi := 7391.2, 7391.3
	cases := []struct {
		name  string
		truth tasks.Truth
		right string // stdout accepted in strict mode
		wrong string // a readable wrong answer
		gold  []string
		// inDetail: a gold token the detailed verdict of the wrong run holds.
		inDetail string
	}{
		{"number", tasks.Truth{Type: schemas.AnswerNumber, Answer: "7391.25"}, "7391.25", "12", []string{"7391.25"}, "7391.25"},
		{"number range", tasks.Truth{Type: schemas.AnswerNumber, Answer: "7391.25", Lower: &lo, Upper: &hi}, "7391.25", "12", []string{"7391.2", "7391.3"}, "7391.2"},
		{"integer", tasks.Truth{Type: schemas.AnswerInteger, Answer: "8317"}, "8317", "12", []string{"8317"}, "8317"},
		{"date", tasks.Truth{Type: schemas.AnswerDate, Answer: "03/14/2031"}, "03/14/2031", "01/01/2000", []string{"03/14/2031", "2031"}, "03/14/2031"},
		{"tuple", tasks.Truth{Type: schemas.AnswerTuple, Answer: "(37 weeks, 5 days)"}, "(37 weeks, 5 days)", "(2 weeks, 1 days)", []string{"37"}, "37 weeks"},
		{"boolean", tasks.Truth{Type: schemas.AnswerBoolean, Answer: "true"}, "true", "false", []string{"true", "True"}, "true"},
		{"string", tasks.Truth{Type: schemas.AnswerString, Answer: "quercetin-9"}, "quercetin-9", "aspirin", []string{"quercetin"}, "quercetin-9"},
		{"list", tasks.Truth{Type: schemas.AnswerList, Values: []string{"alpha-7", "beta-8"}}, "['alpha-7', 'beta-8']", "['alpha-7', 'gamma']", []string{"beta-8"}, "beta-8"},
		{"output", tasks.Truth{Type: schemas.AnswerOutput, Answer: "ACG 0.6667\nTT 0.0\n", Extra: map[string]string{"reference_output": "ok"}},
			"ACG 0.6667\nTT 0.0", "ACG 0.6667\nTT 1.0", []string{"TT 0.0"}, "TT 0.0"},
		{"predictions", tasks.Truth{Type: schemas.AnswerPredictions, Answer: "min_accuracy=0.83",
			Values: []string{"101=yes-label", "102=no-label"},
			Extra:  map[string]string{tasks.ExtraIDColumn: "id", tasks.ExtraPredictionColumn: "prediction", tasks.ExtraMinAccuracy: "0.83"}},
			"", "", []string{"yes-label", "no-label", "0.83", "0.5", "101"}, "0.83"},
	}
	ok := func(stdout string) schemas.ExecResult {
		return schemas.ExecResult{Status: schemas.StatusOK, Stdout: stdout + "\n", Message: stdout}
	}
	modes := []Mode{Strict, Upstream}
	for _, c := range cases {
		runs := map[string]schemas.ExecResult{
			"wrong":      ok(c.wrong),
			"unreadable": ok("n/a ???"),
			"empty":      ok(""),
			"crash":      {Status: schemas.StatusError, ExitCode: 1, Stdout: c.wrong + "\n", Stderr: "Traceback", Message: c.wrong + "\nTraceback"},
			"right":      ok(c.right),
		}
		if c.truth.Type == schemas.AnswerPredictions {
			runs = map[string]schemas.ExecResult{
				"wrong":   {Status: schemas.StatusOK, Files: map[string]string{"predictions.csv": "id,prediction\n101,no-label\n102,yes-label\n"}},
				"garbage": {Status: schemas.StatusOK, Files: map[string]string{"predictions.csv": "nothing here"}},
				"missing": {Status: schemas.StatusOK},
				"right":   {Status: schemas.StatusOK, Files: map[string]string{"predictions.csv": "id,prediction\n101,yes-label\n102,no-label\n"}},
			}
		}
		datasets := append([]string{"anything"}, UpstreamDatasets()...)
		for _, mode := range modes {
			for _, ds := range datasets {
				if mode == Strict && ds != "anything" {
					continue
				}
				for name, res := range runs {
					check, detail := CheckOutputDetail(mode, ds, c.truth, res)
					for _, g := range c.gold {
						if strings.Contains(check.Verdict, g) {
							t.Errorf("%s/%s/%s/%s: the agent's verdict %q holds the gold %q", c.name, mode, ds, name, check.Verdict, g)
						}
					}
					if check.Verdict == "" {
						t.Errorf("%s/%s/%s/%s: empty verdict", c.name, mode, ds, name)
					}
					if CheckOutput(mode, ds, c.truth, res) != check {
						t.Errorf("%s/%s/%s/%s: CheckOutput differs from CheckOutputDetail", c.name, mode, ds, name)
					}
					if mode == Strict && name == "wrong" {
						if !strings.Contains(detail, c.inDetail) {
							t.Errorf("%s: positive control: the detailed verdict %q does not hold the gold %q", c.name, detail, c.inDetail)
						}
						if check.Accepted {
							t.Errorf("%s: a wrong answer was accepted", c.name)
						}
					}
					if mode == Strict && name == "right" && (!check.Accepted || check.Verdict != "accepted") {
						t.Errorf("%s: the right answer: %+v (%s)", c.name, check, detail)
					}
				}
			}
		}
	}
}

// TestVerdictReasons: the agent still learns why a run was rejected when
// the reason is its own output, not the gold.
func TestVerdictReasons(t *testing.T) {
	t.Parallel()
	tr := tasks.Truth{Type: schemas.AnswerNumber, Answer: "5"}
	for _, c := range []struct {
		res  schemas.ExecResult
		want string
	}{
		{schemas.ExecResult{Status: schemas.StatusOK, Stdout: "x y z\n"}, "could not be read as a number"},
		{schemas.ExecResult{Status: schemas.StatusOK, Stdout: "6\n"}, "not the expected answer"},
		{schemas.ExecResult{Status: schemas.StatusOK}, "nothing on stdout"},
		{schemas.ExecResult{Status: schemas.StatusTimeout, ExitCode: -1}, `status "timeout"`},
		{schemas.ExecResult{Status: schemas.StatusSandboxError}, "not an execution"},
	} {
		if v := CheckOutput(Strict, "x", tr, c.res).Verdict; !strings.Contains(v, c.want) {
			t.Errorf("%+v: verdict %q, want %q in it", c.res, v, c.want)
		}
	}
	if !slices.Contains(UpstreamDatasets(), "mimic_iii") {
		t.Fatal("no upstream rule for mimic_iii")
	}
}
