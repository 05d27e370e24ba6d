package verify

import (
	"fmt"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Options configure Score.
type Options struct {
	// Mode is the rule set ("" is Strict).
	Mode Mode
	// FormatReward is added to the reward of every scored episode whose turns
	// all parsed (the paper's GRPO reward: correctness + format). 0 is off.
	// Excluded outcomes always get 0.
	FormatReward float64
	// GradedML makes the reward of a predictions task (AnswerPredictions)
	// the accuracy of its re-checked predictions file instead of 1/0, as
	// upstream scores EHRSHOT (in upstream mode the accuracy is upstream's,
	// over the predicted rows). Outcomes are unchanged.
	GradedML bool
	// WrongAnswerPenalty is EHRSQL 2024's penalty c on tasks that offer
	// abstention (tasks.Truth.Abstention): every scored outcome there that
	// is neither correct nor an abstention (a wrong answer, an answer to an
	// unanswerable question, or no answer at all) gets reward
	// −WrongAnswerPenalty, so the mean reward is the reliability score
	// RS(c). abstained_correctly gets 1 and abstained_wrongly 0. 0 (the
	// default) keeps rewards in {0, 1}. Other tasks are unaffected.
	WrongAnswerPenalty float64
}

// Score turns a finished episode into its typed outcome, its reward and a
// verdict. It re-checks the final answer (or the accepted execution) itself
// and never trusts the worker's Accepted flag. See doc.go for the table.
func Score(opt Options, truth tasks.Truth, res schemas.EpisodeResult) (outcome schemas.Outcome, reward float64, verdict string) {
	if res.Termination == schemas.EndAbandoned {
		return schemas.OutcomeAbandoned, 0, "abandoned: the environment API's client went away or closed the session before the episode ended"
	}
	var acc *float64
	if truth.Type == schemas.AnswerPredictions {
		outcome, verdict, acc = classifyPredictions(opt.Mode, truth, res)
	} else {
		outcome, verdict = classify(opt.Mode, truth, res)
	}
	if truth.Abstention {
		outcome = abstentionOutcome(opt.Mode, truth, res, outcome)
	}
	if Excluded(outcome) {
		return outcome, 0, verdict
	}
	switch {
	case opt.GradedML && truth.Type == schemas.AnswerPredictions:
		if acc != nil {
			reward = *acc
		}
		verdict += fmt.Sprintf("; graded reward %s (accuracy)", fmtNum(reward))
	case outcome == schemas.OutcomeCorrect, outcome == schemas.OutcomeAbstainedCorrectly:
		reward = 1
	case outcome == schemas.OutcomeAbstainedWrongly:
	case truth.Abstention && opt.WrongAnswerPenalty != 0:
		reward = -opt.WrongAnswerPenalty
		verdict += fmt.Sprintf("; wrong-answer penalty %s", fmtNum(opt.WrongAnswerPenalty))
	}
	if opt.FormatReward != 0 && allParsed(res.Turns) {
		reward += opt.FormatReward
		verdict += fmt.Sprintf("; format reward %s (every turn parsed)", fmtNum(opt.FormatReward))
	}
	return outcome, reward, verdict
}

// abstentionOutcome refines correct/incorrect on a task that offers
// abstention: when the scored answer (the re-checked execution's or the
// final answer) is the reserved abstention answer, the outcome is
// abstained_correctly (the task is unanswerable) or abstained_wrongly.
func abstentionOutcome(mode Mode, truth tasks.Truth, res schemas.EpisodeResult, outcome schemas.Outcome) schemas.Outcome {
	if outcome != schemas.OutcomeCorrect && outcome != schemas.OutcomeIncorrect {
		return outcome
	}
	var answer string
	switch res.Termination {
	case schemas.EndAccepted:
		if turn, ok := acceptedTurn(res.Turns); ok {
			answer = CheckOutput(mode, res.Request.Task.Dataset, truth, execOf(turn)).Answer
		}
	case schemas.EndAnswered, schemas.EndTurnLimit:
		answer = CheckAnswer(mode, res.Request.Task.Dataset, truth, res.FinalAnswer).Answer
	}
	if !IsAbstention(answer) {
		return outcome
	}
	if truth.Unanswerable {
		return schemas.OutcomeAbstainedCorrectly
	}
	return schemas.OutcomeAbstainedWrongly
}

// Excluded reports whether an outcome is left out of success rates and RL
// rewards by default: infra_failure, which is never the model's fault, and
// abandoned (schemas.Outcome.Excluded).
func Excluded(o schemas.Outcome) bool { return o.Excluded() }

func classify(mode Mode, truth tasks.Truth, res schemas.EpisodeResult) (schemas.Outcome, string) {
	if mode != "" && mode != Strict && mode != Upstream {
		return schemas.OutcomeInfraFailure, fmt.Sprintf("unknown verifier mode %q", mode)
	}
	dataset := res.Request.Task.Dataset
	switch t := res.Termination; t {
	case schemas.EndAccepted:
		turn, ok := acceptedTurn(res.Turns)
		if !ok {
			return schemas.OutcomeIncorrect, "accepted by the worker, but the episode has no code execution to re-check"
		}
		c := checkOutput(mode, dataset, truth, execOf(turn))
		if c.Accepted {
			return schemas.OutcomeCorrect, fmt.Sprintf("turn %d re-checked: %s", turn.Index, c.Verdict)
		}
		return schemas.OutcomeIncorrect, fmt.Sprintf("accepted by the worker, but turn %d fails the re-check: %s", turn.Index, c.Verdict)
	case schemas.EndAnswered:
		if truth.Type == schemas.AnswerOutput {
			return lastRunOutcome(mode, truth, res, schemas.OutcomeIncorrect, "final answer: ")
		}
		c := CheckAnswer(mode, dataset, truth, res.FinalAnswer)
		if c.Accepted {
			return schemas.OutcomeCorrect, "final answer: " + c.Verdict
		}
		return schemas.OutcomeIncorrect, "final answer: " + c.Verdict
	case schemas.EndTurnLimit:
		if res.Request.Options.Upstream() {
			// Upstream: no accepted execution within num_steps is a failure.
			return schemas.OutcomeTurnLimit, "turn limit reached without an accepted execution (upstream rules)"
		}
		if truth.Type == schemas.AnswerOutput {
			return lastRunOutcome(mode, truth, res, schemas.OutcomeTurnLimit, "turn limit reached: ")
		}
		if res.FinalAnswer != "" {
			if c := CheckAnswer(mode, dataset, truth, res.FinalAnswer); c.Accepted {
				return schemas.OutcomeCorrect, "turn limit reached, but the final answer is correct: " + c.Verdict
			}
		}
		return schemas.OutcomeTurnLimit, "turn limit reached without a correct answer"
	case schemas.EndClosed:
		// The client cut the episode short (its own limit): a turn limit,
		// with nothing graded, whatever the task.
		return schemas.OutcomeTurnLimit, "closed by the client before the episode ended (truncated): nothing is graded"
	case schemas.EndLoop:
		return schemas.OutcomeLoop, "stopped by the loop guard"
	case schemas.EndFormatError:
		return schemas.OutcomeFormatError, "no parsable action"
	case schemas.EndTimeout:
		return schemas.OutcomeTimeout, "episode wall clock exceeded"
	case schemas.EndSandboxError:
		return schemas.OutcomeSandboxError, "the sandbox failed: " + res.Error
	case schemas.EndInfraFailure:
		return schemas.OutcomeInfraFailure, "infrastructure failure: " + res.Error
	default:
		return schemas.OutcomeInfraFailure, fmt.Sprintf("unknown termination %q", t)
	}
}

// lastRunOutcome scores an output task (BioCoder: its program's whole
// stdout is the answer, an answer text is never read) that ended on the
// answer action or the turn limit: the last code run is re-checked, as an
// accepted one would be; when it fails, or there is none, the outcome is
// fail.
func lastRunOutcome(mode Mode, truth tasks.Truth, res schemas.EpisodeResult, fail schemas.Outcome, prefix string) (schemas.Outcome, string) {
	turn, ok := lastCodeTurn(res.Turns)
	if !ok {
		return fail, prefix + "no code run to re-check (this task is scored from its program's output)"
	}
	c := checkOutput(mode, res.Request.Task.Dataset, truth, execOf(turn))
	if c.Accepted {
		return schemas.OutcomeCorrect, fmt.Sprintf("%sthe last code run (turn %d) re-checked: %s", prefix, turn.Index, c.Verdict)
	}
	return fail, fmt.Sprintf("%sthe last code run (turn %d) re-checked: %s", prefix, turn.Index, c.Verdict)
}

// acceptedTurn finds the execution to re-check for an accepted episode: the
// last turn the worker flagged, else the last turn that ran code.
func acceptedTurn(turns []schemas.Turn) (schemas.Turn, bool) {
	for i := len(turns) - 1; i >= 0; i-- {
		if turns[i].Accepted && ranCode(turns[i]) {
			return turns[i], true
		}
	}
	for i := len(turns) - 1; i >= 0; i-- {
		if ranCode(turns[i]) {
			return turns[i], true
		}
	}
	return schemas.Turn{}, false
}

func ranCode(t schemas.Turn) bool {
	return t.ExecStatus != "" && t.ExecStatus != schemas.StatusInfo && t.ActionName != schemas.ActionAnswer
}

func execOf(t schemas.Turn) schemas.ExecResult {
	return schemas.ExecResult{
		Status:     t.ExecStatus,
		ExitCode:   t.ExitCode,
		Stdout:     t.Stdout,
		Stderr:     t.Stderr,
		Truncated:  t.Truncated,
		DurationMS: t.DurationMS,
		Message:    t.Observation,
		Files:      t.Files,
	}
}

func allParsed(turns []schemas.Turn) bool {
	if len(turns) == 0 {
		return false
	}
	for _, t := range turns {
		if t.ParseError != "" {
			return false
		}
	}
	return true
}

// classifyPredictions is classify for predictions tasks: the file is
// re-checked on the accepted turn (termination accepted) or on the last
// turn that ran code (answered, turn limit: an answer text carries no
// file). acc is the re-checked file's accuracy, nil when nothing was
// re-checked.
func classifyPredictions(mode Mode, truth tasks.Truth, res schemas.EpisodeResult) (schemas.Outcome, string, *float64) {
	switch res.Termination {
	case schemas.EndAccepted, schemas.EndAnswered, schemas.EndTurnLimit:
	default:
		o, v := classify(mode, truth, res)
		return o, v, nil
	}
	if mode != "" && mode != Strict && mode != Upstream {
		return schemas.OutcomeInfraFailure, fmt.Sprintf("unknown verifier mode %q", mode), nil
	}
	var (
		turn schemas.Turn
		ok   bool
	)
	if res.Termination == schemas.EndAccepted {
		turn, ok = acceptedTurn(res.Turns)
	} else {
		turn, ok = lastCodeTurn(res.Turns)
	}
	if !ok {
		switch res.Termination {
		case schemas.EndAccepted:
			return schemas.OutcomeIncorrect, "accepted by the worker, but the episode has no code execution to re-check", nil
		case schemas.EndAnswered:
			return schemas.OutcomeIncorrect, "final answer: no code execution wrote a predictions file", nil
		}
		return schemas.OutcomeTurnLimit, "turn limit reached without a correct answer", nil
	}
	_, accepted, v, acc := checkPredictions(mode, truth, execOf(turn))
	v = fmt.Sprintf("turn %d re-checked: %s", turn.Index, v)
	switch {
	case accepted && !(res.Termination == schemas.EndTurnLimit && res.Request.Options.Upstream()):
		return schemas.OutcomeCorrect, v, &acc
	case res.Termination == schemas.EndTurnLimit:
		return schemas.OutcomeTurnLimit, "turn limit reached without a correct answer; " + v, &acc
	}
	return schemas.OutcomeIncorrect, v, &acc
}

// lastCodeTurn is the last turn that ran code and returned output files
// (the llm-worker keeps files on that turn only), else the last that ran
// code.
func lastCodeTurn(turns []schemas.Turn) (schemas.Turn, bool) {
	for i := len(turns) - 1; i >= 0; i-- {
		if ranCode(turns[i]) && turns[i].Files != nil {
			return turns[i], true
		}
	}
	for i := len(turns) - 1; i >= 0; i-- {
		if ranCode(turns[i]) {
			return turns[i], true
		}
	}
	return schemas.Turn{}, false
}
