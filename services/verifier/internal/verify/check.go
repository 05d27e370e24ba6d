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
// abstention an abstention, which is final), the answer it was read as,
// and a human-readable verdict. A sandbox failure or a non-execution action
// (status sandbox_error or info) is never accepted, in any mode.
func CheckOutput(mode Mode, dataset string, truth tasks.Truth, res schemas.ExecResult) schemas.Check {
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
