package verify

import (
	"fmt"
	"unicode/utf8"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// maxAnswerBytes caps Check.Answer: it is for people and logs, and the full
// output already travels in the observation.
const maxAnswerBytes = 4096

// CheckOutput checks one code execution's output (upstream's per-step
// validate): whether it is accepted (correct, or on a task that offers
// abstention an abstention, which is final), the answer it was read as, and
// a verdict fit for the agent (AgentVerdict: it never holds the gold value,
// since show_verdict feeds it back to the model). A sandbox failure or a
// non-execution action (status sandbox_error or info) is never accepted, in
// any mode.
func CheckOutput(mode Mode, dataset string, truth tasks.Truth, res schemas.ExecResult) schemas.Check {
	c, _ := CheckOutputDetail(mode, dataset, truth, res)
	return c
}

// CheckOutputDetail is CheckOutput that also returns the detailed verdict,
// which may quote the gold value ("… differs from <gold>"): it is for the
// verifier's own logs and never leaves the verifier.
func CheckOutputDetail(mode Mode, dataset string, truth tasks.Truth, res schemas.ExecResult) (schemas.Check, string) {
	c := checkOutput(mode, dataset, truth, res)
	detail := c.Verdict
	c.Verdict = AgentVerdict(mode, truth, res, c)
	return c, detail
}

func checkOutput(mode Mode, dataset string, truth tasks.Truth, res schemas.ExecResult) schemas.Check {
	c := schemas.Check{VerifierVersion: VersionFor(mode)}
	switch res.Status {
	case schemas.StatusSandboxError, schemas.StatusInfo:
		c.Verdict = fmt.Sprintf("rejected: status %q is not an execution of the agent's code", res.Status)
		return c
	}
	var (
		answer string
		ok     bool
	)
	if truth.Type == schemas.AnswerPredictions && (mode == Strict || mode == "" || mode == Upstream) {
		answer, ok, c.Verdict, _ = checkPredictions(mode, truth, res)
		c.Accepted = ok
		c.Answer = clip(answer)
		return c
	}
	switch mode {
	case Strict, "":
		answer, ok, c.Verdict = strictOutput(truth, res)
	case Upstream:
		msg, success := envMessage(res)
		name, rule := lookupRule(dataset, truth)
		if rule == nil || truth.Abstention { // MedAgentGym has no abstention: strict rules
			answer, ok, c.Verdict = strictOutput(truth, res)
			c.Verdict = fmt.Sprintf("no upstream rule for %q, strict rules used; %s", name, c.Verdict)
			break
		}
		answer = msg
		ok, c.Verdict = rule(truth, msg, success)
	default:
		c.Verdict = fmt.Sprintf("rejected: unknown verifier mode %q", mode)
	}
	c.Accepted = ok
	c.Answer = clip(answer)
	return c
}

// CheckAnswer checks an explicit final answer string.
//
// Strict: the answer is read like stdout (the last non-empty line, or the
// whole text for lists). Upstream has no explicit answer: the dataset's rule
// is applied to the answer as the env_message of a clean run, so the rules
// that ignore the output (EHR-SeqSQL, BioDSBench) accept any answer, as
// upstream accepts any execution.
func CheckAnswer(mode Mode, dataset string, truth tasks.Truth, answer string) schemas.Check {
	c := schemas.Check{VerifierVersion: VersionFor(mode)}
	var (
		got string
		ok  bool
	)
	if truth.Type == schemas.AnswerPredictions {
		c.Verdict = "rejected: this task is scored from its predictions file, not from an answer text"
		return c
	}
	switch mode {
	case Strict, "":
		got, ok, c.Verdict = strictText(truth, answer, "the answer")
	case Upstream:
		name, rule := lookupRule(dataset, truth)
		if rule == nil || truth.Abstention { // MedAgentGym has no abstention: strict rules
			got, ok, c.Verdict = strictText(truth, answer, "the answer")
			c.Verdict = fmt.Sprintf("no upstream rule for %q, strict rules used; %s", name, c.Verdict)
			break
		}
		got = answer
		ok, c.Verdict = rule(truth, answer, true)
	default:
		c.Verdict = fmt.Sprintf("rejected: unknown verifier mode %q", mode)
	}
	c.Accepted = ok
	c.Answer = clip(got)
	return c
}

// clip shortens s to at most maxAnswerBytes on a rune boundary.
func clip(s string) string {
	if len(s) <= maxAnswerBytes {
		return s
	}
	cut := maxAnswerBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// AgentVerdict is the verdict on an execution as the agent may see it. It
// is built only from what the agent already knows (the run's status and
// exit code, the output file the task names, the answer type in its task
// view) and whether the answer was accepted and could be read, never from
// the truth's values, so no gold value, bound, list element or label can
// reach the model (docs/adr/0008-agent-and-verifier-trees.md).
func AgentVerdict(mode Mode, truth tasks.Truth, res schemas.ExecResult, c schemas.Check) string {
	switch {
	case res.Status == schemas.StatusSandboxError || res.Status == schemas.StatusInfo:
		return fmt.Sprintf("rejected: status %q is not an execution of the agent's code", res.Status)
	case c.Accepted:
		return "accepted"
	case mode != Strict && mode != "" && mode != Upstream:
		return fmt.Sprintf("rejected: unknown verifier mode %q", mode)
	}
	if truth.Type == schemas.AnswerPredictions {
		name := truth.Extra[tasks.ExtraOutputFile]
		if name == "" {
			name = "predictions.csv"
		}
		if mode != Upstream && (res.Status != schemas.StatusOK || res.ExitCode != 0) {
			return fmt.Sprintf("rejected: the run ended with status %q (exit code %d); strict mode accepts only a clean exit", res.Status, res.ExitCode)
		}
		if _, ok := res.Files[name]; !ok {
			return fmt.Sprintf("rejected: the run did not write %s in the working directory", name)
		}
		return fmt.Sprintf("rejected: the predictions in %s do not meet the task's requirements", name)
	}
	if mode == Upstream {
		return "rejected: the output is not the expected answer (upstream rules)"
	}
	if res.Status != schemas.StatusOK || res.ExitCode != 0 {
		return fmt.Sprintf("rejected: the run ended with status %q (exit code %d); strict mode accepts only a clean exit", res.Status, res.ExitCode)
	}
	t := answerType(truth)
	if t == schemas.AnswerOutput {
		// Whether the reference could be run is the operator's state, not
		// the reference's output; what it prints is never said.
		switch st := truth.Extra["reference_output"]; {
		case st == "missing" || st == "failed":
			return "rejected: this task has no usable reference output, so no output can be checked (not a fault of the code)"
		case res.Truncated:
			return "rejected: the output was truncated"
		}
		return "rejected: the program's stdout is not the expected output"
	}
	if c.Answer == "" {
		return "rejected: nothing on stdout (the answer is read from its last non-empty line; stderr is never read)"
	}
	if !readableAs(t, c.Answer) {
		return fmt.Sprintf("rejected: the answer on stdout could not be read as a %s", t)
	}
	return fmt.Sprintf("rejected: the %s on stdout is not the expected answer", t)
}

// readableAs reports whether an extracted answer parses as type t (no
// comparison with the truth).
func readableAs(t schemas.AnswerType, got string) bool {
	var err error
	switch t {
	case schemas.AnswerNumber, schemas.AnswerInteger:
		_, err = parseNumber(got)
	case schemas.AnswerDate:
		_, err = parseDate(got)
	case schemas.AnswerTuple:
		_, err = parseTuple(got)
	case schemas.AnswerBoolean:
		_, err = parseBool(got)
	case schemas.AnswerList:
		_, err = parseList(got)
	}
	return err == nil
}
