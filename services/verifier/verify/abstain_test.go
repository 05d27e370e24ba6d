package verify

import (
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Abstention (EHRSQL 2024): an answerable task (count 3) and an
// unanswerable one, each scored for every way an episode can end.
func TestScoreAbstention(t *testing.T) {
	t.Parallel()
	answerable := tasks.Truth{Type: schemas.AnswerInteger, Answer: "3", Abstention: true}
	unanswerable := tasks.Truth{Type: schemas.AnswerList, Answer: schemas.AbstainAnswer, Abstention: true, Unanswerable: true}
	// The same answers on a task that does not offer abstention: "null" is
	// just a wrong answer there (positive control for the Abstention flag).
	plain := tasks.Truth{Type: schemas.AnswerInteger, Answer: "3"}
	ehr := func(term schemas.Termination, final string, turns ...schemas.Turn) schemas.EpisodeResult {
		r := episode(term, final, turns...)
		r.Request.Task.Dataset = "ehrsql2024"
		return r
	}
	answer := schemas.Turn{ActionName: schemas.ActionAnswer}
	printNull := codeTurn(schemas.StatusOK, 0, "rows: 0\nnull\n", "", true)
	crashedNull := codeTurn(schemas.StatusError, 1, "null\n", "Traceback", true)
	print3 := codeTurn(schemas.StatusOK, 0, "3\n", "", true)

	cases := []struct {
		name    string
		truth   tasks.Truth
		opt     Options
		res     schemas.EpisodeResult
		outcome schemas.Outcome
		reward  float64
		verdict string
	}{
		{"answerable, correct", answerable, Options{}, ehr(schemas.EndAnswered, "3", answer), schemas.OutcomeCorrect, 1, "accepted"},
		{"answerable, wrong", answerable, Options{}, ehr(schemas.EndAnswered, "4", answer), schemas.OutcomeIncorrect, 0, "rejected"},
		{"answerable, wrong, penalty 5", answerable, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndAnswered, "4", answer), schemas.OutcomeIncorrect, -5, "penalty 5"},
		{"answerable, abstained", answerable, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndAnswered, "null", answer), schemas.OutcomeAbstainedWrongly, 0, "abstained on a question the data answers"},
		{"answerable, abstained by code", answerable, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndAccepted, "", printNull), schemas.OutcomeAbstainedWrongly, 0, "abstained_wrongly"},
		{"answerable, abstention at the turn limit", answerable, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndTurnLimit, "null"), schemas.OutcomeAbstainedWrongly, 0, "abstained"},
		{"answerable, abstained any case", answerable, Options{}, ehr(schemas.EndAnswered, " NULL ", answer), schemas.OutcomeAbstainedWrongly, 0, "abstained"},
		{"unanswerable, abstained by answer", unanswerable, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndAnswered, "null", answer), schemas.OutcomeAbstainedCorrectly, 1, "cannot answer"},
		{"unanswerable, abstained by quoted answer", unanswerable, Options{}, ehr(schemas.EndAnswered, `"null"`, answer), schemas.OutcomeAbstainedCorrectly, 1, "cannot answer"},
		{"unanswerable, abstained by code (upstream-compat)", unanswerable, Options{Mode: Upstream}, ehr(schemas.EndAccepted, "", printNull), schemas.OutcomeAbstainedCorrectly, 1, "re-checked"},
		{"unanswerable, abstained by code (strict)", unanswerable, Options{}, ehr(schemas.EndAccepted, "", printNull), schemas.OutcomeAbstainedCorrectly, 1, "re-checked"},
		{"unanswerable, crashed run printing null", unanswerable, Options{WrongAnswerPenalty: 10}, ehr(schemas.EndAccepted, "", crashedNull), schemas.OutcomeIncorrect, -10, "clean exit"},
		{"unanswerable, answered", unanswerable, Options{WrongAnswerPenalty: 10}, ehr(schemas.EndAnswered, "[1, 2]", answer), schemas.OutcomeIncorrect, -10, "cannot answer"},
		{"unanswerable, answered by code", unanswerable, Options{}, ehr(schemas.EndAccepted, "", print3), schemas.OutcomeIncorrect, 0, "cannot answer"},
		{"unanswerable, turn limit", unanswerable, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndTurnLimit, ""), schemas.OutcomeTurnLimit, -5, "turn limit"},
		{"unanswerable, turn limit with abstention", unanswerable, Options{}, ehr(schemas.EndTurnLimit, "null"), schemas.OutcomeAbstainedCorrectly, 1, "turn limit"},
		{"unanswerable, infra failure excluded", unanswerable, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndInfraFailure, ""), schemas.OutcomeInfraFailure, 0, "infrastructure"},
		{"no abstention offered: null is wrong", plain, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndAnswered, "null", answer), schemas.OutcomeIncorrect, 0, "rejected"},
		{"no abstention offered: no penalty", plain, Options{WrongAnswerPenalty: 5}, ehr(schemas.EndAnswered, "4", answer), schemas.OutcomeIncorrect, 0, "rejected"},
	}
	for _, c := range cases {
		o, r, v := Score(c.opt, c.truth, c.res)
		if o != c.outcome || r != c.reward || !strings.Contains(v, c.verdict) {
			t.Errorf("%s: got (%s, %v, %q), want (%s, %v, …%q…)", c.name, o, r, v, c.outcome, c.reward, c.verdict)
		}
	}
}

// A per-step check (CheckOutput) accepts every abstention as final, on
// answerable and unanswerable tasks alike, so whether an end-on-accepted
// episode stops on it tells the agent nothing; an answer to an
// unanswerable task is rejected.
func TestCheckOutputAbstention(t *testing.T) {
	t.Parallel()
	un := tasks.Truth{Type: schemas.AnswerList, Answer: schemas.AbstainAnswer, Abstention: true, Unanswerable: true}
	ans := tasks.Truth{Type: schemas.AnswerList, Values: []string{"iv"}, Abstention: true}
	run := func(out string) schemas.ExecResult { return schemas.ExecResult{Status: schemas.StatusOK, Stdout: out} }
	for _, m := range []Mode{Strict, Upstream} {
		if c := CheckOutput(m, "ehrsql2024", un, run("null\n")); !c.Accepted || c.Answer != "null" {
			t.Errorf("%s: abstention on an unanswerable task: %+v", m, c)
		}
		if c := CheckOutput(m, "ehrsql2024", un, run("['iv']\n")); c.Accepted {
			t.Errorf("%s: an answer to an unanswerable task was accepted: %+v", m, c)
		}
		c, detail := CheckOutputDetail(m, "ehrsql2024", ans, run("null\n"))
		if !c.Accepted || !strings.Contains(detail, "abstained_wrongly") {
			t.Errorf("%s: an abstention on an answerable task was not final: %+v (%s)", m, c, detail)
		}
		// What the agent may be shown is the same for both: no leak.
		if cu := CheckOutput(m, "ehrsql2024", un, run("null\n")); cu.Verdict != c.Verdict || cu.Accepted != c.Accepted {
			t.Errorf("%s: the agent can tell an answerable question from its abstention check: %+v vs %+v", m, c, cu)
		}
		if c := CheckOutput(m, "ehrsql2024", ans, run("['iv']\n")); !c.Accepted {
			t.Errorf("%s: the right answer was rejected: %+v", m, c)
		}
	}
}
