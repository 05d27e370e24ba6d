package verify

import (
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

func f64(v float64) *float64 { return &v }

// medcalcTruth is row 1 of MedCalc-Bench (BMI 25.238, bounds ±5%).
var medcalcTruth = tasks.Truth{Type: schemas.AnswerNumber, Answer: "25.238", Lower: f64(23.9761), Upper: f64(26.4999)}

func episode(term schemas.Termination, final string, turns ...schemas.Turn) schemas.EpisodeResult {
	for i := range turns {
		turns[i].Index = i
	}
	return schemas.EpisodeResult{
		Request:     schemas.EpisodeRequest{Task: schemas.TaskView{ID: "t1", Dataset: "medcalcbench"}},
		Turns:       turns,
		FinalAnswer: final,
		Termination: term,
	}
}

// upstreamCompat marks an episode as played under MedAgentGym's episode
// rules (EpisodeOptions.Compat upstream).
func upstreamCompat(r schemas.EpisodeResult) schemas.EpisodeResult {
	r.Request.Options = schemas.UpstreamOptions()
	return r
}

func codeTurn(status string, exit int, out, errOut string, accepted bool) schemas.Turn {
	return schemas.Turn{ActionName: schemas.ActionValidateCode, ExecStatus: status, ExitCode: exit, Stdout: out, Stderr: errOut, Accepted: accepted}
}

func TestScore(t *testing.T) {
	t.Parallel()
	good := codeTurn(schemas.StatusOK, 0, "25.3\n", "", true)
	wrongFlagged := codeTurn(schemas.StatusOK, 0, "7\n", "", true)
	crashed := codeTurn(schemas.StatusError, 1, "25.3\n", "Traceback", true)
	info := schemas.Turn{ActionName: schemas.ActionRequestInfo, ExecStatus: schemas.StatusInfo, Stdout: "25.3"}
	badParse := schemas.Turn{ParseError: "no JSON object"}
	answer := schemas.Turn{ActionName: schemas.ActionAnswer}

	cases := []struct {
		name    string
		opt     Options
		res     schemas.EpisodeResult
		outcome schemas.Outcome
		reward  float64
		verdict string // substring
	}{
		{"accepted and correct", Options{}, episode(schemas.EndAccepted, "", info, good), schemas.OutcomeCorrect, 1, "re-checked"},
		{"accepted, worker flag wrong", Options{}, episode(schemas.EndAccepted, "", wrongFlagged), schemas.OutcomeIncorrect, 0, "fails the re-check"},
		{"accepted, crashed run", Options{}, episode(schemas.EndAccepted, "", crashed), schemas.OutcomeIncorrect, 0, "clean exit"},
		{"accepted upstream, any number", Options{Mode: Upstream}, episode(schemas.EndAccepted, "", wrongFlagged), schemas.OutcomeCorrect, 1, "upstream"},
		{"accepted, flagged turn preferred", Options{}, episode(schemas.EndAccepted, "", good, codeTurn(schemas.StatusOK, 0, "7\n", "", false)), schemas.OutcomeCorrect, 1, "turn 0"},
		{"accepted, unflagged last execution", Options{}, episode(schemas.EndAccepted, "", wrongFlagged, codeTurn(schemas.StatusOK, 0, "25.3\n", "", false)), schemas.OutcomeIncorrect, 0, "turn 0"},
		{"accepted, last execution when none flagged", Options{}, episode(schemas.EndAccepted, "", codeTurn(schemas.StatusOK, 0, "25.3\n", "", false), info), schemas.OutcomeCorrect, 1, "turn 0"},
		{"accepted without any execution", Options{}, episode(schemas.EndAccepted, "", info), schemas.OutcomeIncorrect, 0, "no code execution"},
		{"answered correct", Options{}, episode(schemas.EndAnswered, "25.3", answer), schemas.OutcomeCorrect, 1, "final answer"},
		{"answered wrong", Options{}, episode(schemas.EndAnswered, "7", answer), schemas.OutcomeIncorrect, 0, "outside"},
		{"answered upstream, any number", Options{Mode: Upstream}, episode(schemas.EndAnswered, "7", answer), schemas.OutcomeCorrect, 1, "upstream"},
		{"answered empty", Options{}, episode(schemas.EndAnswered, "", answer), schemas.OutcomeIncorrect, 0, "nothing"},
		{"turn limit", Options{}, episode(schemas.EndTurnLimit, "", good), schemas.OutcomeTurnLimit, 0, "turn limit"},
		{"turn limit, wrong answer", Options{}, episode(schemas.EndTurnLimit, "7", good), schemas.OutcomeTurnLimit, 0, "turn limit"},
		{"turn limit, correct answer", Options{}, episode(schemas.EndTurnLimit, "25.3", good), schemas.OutcomeCorrect, 1, "final answer is correct"},
		{"turn limit, correct answer, upstream compat", Options{Mode: Upstream}, upstreamCompat(episode(schemas.EndTurnLimit, "25.3", good)), schemas.OutcomeTurnLimit, 0, "upstream rules"},
		{"turn limit, correct answer, upstream verifier only", Options{Mode: Upstream}, episode(schemas.EndTurnLimit, "25.3", good), schemas.OutcomeCorrect, 1, "final answer is correct"},
		// The environment API's client ended the episode (its own limit):
		// scored, never graded, whatever it printed or answered last.
		{"closed by the client", Options{}, episode(schemas.EndClosed, "25.3", good), schemas.OutcomeTurnLimit, 0, "closed by the client"},
		{"loop", Options{}, episode(schemas.EndLoop, "25.3", good, good), schemas.OutcomeLoop, 0, "loop"},
		{"format error", Options{}, episode(schemas.EndFormatError, "", badParse), schemas.OutcomeFormatError, 0, "parsable"},
		{"timeout", Options{}, episode(schemas.EndTimeout, "25.3"), schemas.OutcomeTimeout, 0, "wall clock"},
		{"sandbox error", Options{}, episode(schemas.EndSandboxError, ""), schemas.OutcomeSandboxError, 0, "sandbox"},
		{"infra failure", Options{}, episode(schemas.EndInfraFailure, "25.3", good), schemas.OutcomeInfraFailure, 0, "infrastructure"},
		{"unknown termination", Options{}, episode("gave_up", "25.3"), schemas.OutcomeInfraFailure, 0, "unknown termination"},
		{"unknown mode", Options{Mode: "bogus"}, episode(schemas.EndAnswered, "25.3"), schemas.OutcomeInfraFailure, 0, "unknown verifier mode"},

		{"format reward on correct", Options{FormatReward: 0.1}, episode(schemas.EndAccepted, "", info, good), schemas.OutcomeCorrect, 1.1, "format reward"},
		{"format reward on incorrect", Options{FormatReward: 0.1}, episode(schemas.EndAnswered, "7", answer), schemas.OutcomeIncorrect, 0.1, "format reward"},
		{"format reward on turn limit", Options{FormatReward: 0.1}, episode(schemas.EndTurnLimit, "", good), schemas.OutcomeTurnLimit, 0.1, "format reward"},
		{"no format reward with a parse error", Options{FormatReward: 0.1}, episode(schemas.EndAccepted, "", badParse, good), schemas.OutcomeCorrect, 1, "re-checked"},
		{"no format reward without turns", Options{FormatReward: 0.1}, episode(schemas.EndTimeout, ""), schemas.OutcomeTimeout, 0, "wall clock"},
		{"no format reward when excluded", Options{FormatReward: 0.1}, episode(schemas.EndInfraFailure, "", good), schemas.OutcomeInfraFailure, 0, "infrastructure"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o, r, v := Score(c.opt, medcalcTruth, c.res)
			if o != c.outcome || r != c.reward {
				t.Errorf("Score = %s, %v (%q); want %s, %v", o, r, v, c.outcome, c.reward)
			}
			if !strings.Contains(v, c.verdict) {
				t.Errorf("verdict %q does not contain %q", v, c.verdict)
			}
			if !o.Valid() {
				t.Errorf("outcome %q is not a schemas outcome", o)
			}
		})
	}
}

// Every termination the schemas define maps to a valid outcome.
func TestScoreCoversTerminations(t *testing.T) {
	t.Parallel()
	for _, term := range []schemas.Termination{
		schemas.EndAccepted, schemas.EndAnswered, schemas.EndTurnLimit, schemas.EndLoop, schemas.EndFormatError,
		schemas.EndTimeout, schemas.EndInfraFailure, schemas.EndSandboxError, schemas.EndAbandoned,
	} {
		o, _, v := Score(Options{}, medcalcTruth, episode(term, ""))
		if !o.Valid() || strings.Contains(v, "unknown termination") {
			t.Errorf("termination %s → %q (%s)", term, o, v)
		}
	}
}

// TestAbandoned: an abandoned episode (the environment API's client went
// away) is scored abandoned with reward 0, whatever its last answer.
func TestAbandoned(t *testing.T) {
	t.Parallel()
	res := episode(schemas.EndAbandoned, "")
	res.FinalAnswer = "25.2"
	o, r, v := Score(Options{FormatReward: 0.5}, medcalcTruth, res)
	if o != schemas.OutcomeAbandoned || r != 0 || !strings.Contains(v, "abandoned") {
		t.Fatalf("abandoned episode scored %s, %g (%s)", o, r, v)
	}
}

func TestExcluded(t *testing.T) {
	t.Parallel()
	for _, o := range schemas.Outcomes {
		if got, want := Excluded(o), o == schemas.OutcomeInfraFailure || o == schemas.OutcomeAbandoned; got != want {
			t.Errorf("Excluded(%s) = %t, want %t", o, got, want)
		}
	}
}
