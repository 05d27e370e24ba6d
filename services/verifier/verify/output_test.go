package verify

import (
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// TestProgramOutput checks the strict rule of an output task (BioCoder):
// the harnessed program's whole stdout against the reference run's, and
// what upstream's rule does with the same runs.
func TestProgramOutput(t *testing.T) {
	t.Parallel()
	ref := "ACG 0.6667\nTT 0.0\n"
	truth := func(answer, state string) tasks.Truth {
		return tasks.Truth{Type: schemas.AnswerOutput, Answer: answer,
			Extra: map[string]string{"reference_output": state, "reference_message": answer}}
	}
	run := func(stdout string) schemas.ExecResult {
		return schemas.ExecResult{Status: schemas.StatusOK, Stdout: stdout, Message: stdout}
	}
	cases := []struct {
		name   string
		truth  tasks.Truth
		res    schemas.ExecResult
		strict bool
		up     bool
		want   string
	}{
		{"same output", truth(ref, "ok"), run(ref), true, true, "equals the reference"},
		{"CRLF and trailing blank", truth(ref, "ok"), run("ACG 0.6667\r\nTT 0.0\r\n\n"), true, false, "equals the reference"},
		{"one line differs", truth(ref, "ok"), run("ACG 0.6667\nTT 1.0\n"), false, false, `line 2 is "TT 1.0"`},
		{"missing line", truth(ref, "ok"), run("ACG 0.6667\n"), false, false, `line 2 is "<none>"`},
		{"silent program", truth(ref, "ok"), run(""), false, false, `line 1 is ""`},
		// Upstream reads env_message and ignores the status.
		{"crash", truth(ref, "ok"), schemas.ExecResult{Status: schemas.StatusError, ExitCode: 1, Stdout: ref}, false, true, "clean exit"},
		{"truncated", truth(ref, "ok"), schemas.ExecResult{Status: schemas.StatusOK, Stdout: ref, Truncated: true, Message: ref}, false, true, "truncated"},
		// Upstream accepts any silent program when the reference is silent.
		{"silent reference", truth("", "ok"), run(""), false, true, "prints nothing"},
		{"no reference output", truth("", "missing"), run(ref), false, false, "medgym tasks reference-outputs"},
		{"failed reference", truth("Traceback", "failed"), run("Traceback"), false, true, "does not run cleanly"},
	}
	for _, c := range cases {
		s := checkOutput(Strict, "biocoder", c.truth, c.res) // the detailed verdict
		if s.Accepted != c.strict || !strings.Contains(s.Verdict, c.want) {
			t.Errorf("%s: strict %v %q, want %v and %q", c.name, s.Accepted, s.Verdict, c.strict, c.want)
		}
		if u := CheckOutput(Upstream, "biocoder", c.truth, c.res); u.Accepted != c.up {
			t.Errorf("%s: upstream %v %q, want %v", c.name, u.Accepted, u.Verdict, c.up)
		}
	}
	if c := CheckAnswer(Strict, "biocoder", truth(ref, "ok"), ref); c.Accepted || !strings.Contains(c.Verdict, "program's output") {
		t.Errorf("answer text accepted for an output task: %+v", c)
	}
}

// TestScoreOutputTaskByLastRun: an output task (BioCoder) that ends on the
// answer action or the turn limit, as every episode does under end_on
// answer (the default), is scored by re-checking its last code run; an
// answer text is never read. Before, such an episode could never be
// correct.
func TestScoreOutputTaskByLastRun(t *testing.T) {
	t.Parallel()
	ref := "ACG 0.6667\nTT 0.0\n"
	truth := tasks.Truth{Type: schemas.AnswerOutput, Answer: ref, Extra: map[string]string{"reference_output": "ok", "reference_message": ref}}
	ep := func(term schemas.Termination, final string, outs ...string) schemas.EpisodeResult {
		r := schemas.EpisodeResult{Request: schemas.EpisodeRequest{Task: schemas.TaskView{Dataset: "biocoder"}}, Termination: term, FinalAnswer: final}
		for i, o := range outs {
			r.Turns = append(r.Turns, schemas.Turn{Index: i, ActionName: schemas.ActionValidateCode, ExecStatus: schemas.StatusOK, Stdout: o})
		}
		r.Turns = append(r.Turns, schemas.Turn{Index: len(outs), ActionName: schemas.ActionAnswer})
		return r
	}
	for _, c := range []struct {
		name    string
		res     schemas.EpisodeResult
		outcome schemas.Outcome
		reward  float64
	}{
		{"answered after the right program", ep(schemas.EndAnswered, "done", "wrong\n", ref), schemas.OutcomeCorrect, 1},
		{"answered after a wrong last program", ep(schemas.EndAnswered, ref, ref, "wrong\n"), schemas.OutcomeIncorrect, 0},
		{"answered without a program", ep(schemas.EndAnswered, ref), schemas.OutcomeIncorrect, 0},
		{"turn limit after the right program", ep(schemas.EndTurnLimit, "TT 0.0", ref), schemas.OutcomeCorrect, 1},
		{"turn limit after a wrong program", ep(schemas.EndTurnLimit, "", "wrong\n"), schemas.OutcomeTurnLimit, 0},
		{"closed by the client after the right program", ep(schemas.EndClosed, "", ref), schemas.OutcomeTurnLimit, 0},
	} {
		o, r, v := Score(Options{}, truth, c.res)
		if o != c.outcome || r != c.reward {
			t.Errorf("%s: %s %v (%s), want %s %v", c.name, o, r, v, c.outcome, c.reward)
		}
	}
}
