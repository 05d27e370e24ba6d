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
