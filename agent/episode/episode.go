package episode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/schemas"
)

// Completion is one policy reply.
type Completion struct {
	Text, Reasoning, FinishReason  string
	PromptTokens, CompletionTokens int
	PromptTokenIDs, TokenIDs       []int32
	Logprobs                       []float32
	Latency                        time.Duration
}

// Policy produces the next assistant message of an episode.
type Policy interface {
	Complete(ctx context.Context, req schemas.EpisodeRequest, msgs []schemas.ChatMessage) (Completion, error)
}

// Debugger answers upstream's debug action: an env-side model call, not a
// policy step. turns are the episode's turns before the debug action (the
// debugger reads the request_info results from them); code and errMsg are
// the action's parameters.
type Debugger interface {
	Debug(ctx context.Context, req schemas.EpisodeRequest, turns []schemas.Turn, code, errMsg string) (string, error)
}

// Engine runs episodes.
type Engine struct {
	// Policy returns the policy for an episode's spec.
	Policy func(spec schemas.PolicySpec) (Policy, error)
	// Debugger serves the debug action; nil means the action is unavailable.
	Debugger Debugger
	// SystemAsUser folds the system prompt into the first user message.
	SystemAsUser bool
	// DefaultTimeout is the clock of an episode whose options set none
	// (EpisodeTimeoutSec 0); zero: such an episode has no clock.
	DefaultTimeout time.Duration
	Now            func() time.Time
	Worker         string
}

// Errors a Policy wraps to say how its call failed; any other error ends
// the episode as an infrastructure failure.
var (
	// ErrContextOverflow: the conversation no longer fits the model's
	// context. The episode ends at the turn limit without an answer (scored
	// 0, as any turn limit without one): the agent's conversation outgrew
	// its model, which says something about the agent.
	ErrContextOverflow = errors.New("the conversation exceeds the model's context")
	// ErrUnavailable: the model endpoint was failing (unreachable,
	// overloaded, erroring) when the call gave up. When the episode's clock
	// ran out during such a wait the episode is an infrastructure failure;
	// when it ran out while the model was working (or hanging), a timeout.
	ErrUnavailable = errors.New("the model endpoint is unavailable")
)

// ErrAwaitReply, returned by a Policy, says the reply comes from outside
// medgym and is not here yet (the environment server's client is the
// model). Start, Continue and Resume then return the state reached so far
// and a Step with neither Action nor Result: the episode waits for the
// reply, which the caller hands in by calling Resume once its Policy has it.
var ErrAwaitReply = errors.New("awaiting the policy's reply")

// Step is what to publish after a state change: at most one of Action and
// Result is set; neither when the episode awaits an outside reply
// (ErrAwaitReply).
type Step struct {
	Action *schemas.ActionRequest
	Result *schemas.EpisodeResult
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now().UTC()
}

// Start begins an episode.
func (e *Engine) Start(ctx context.Context, req schemas.EpisodeRequest) (schemas.EpisodeState, Step, error) {
	st := schemas.EpisodeState{
		Request:   req,
		Messages:  agent.BuildMessages(req.Task, agent.EpisodePromptOptions(req.Options, e.SystemAsUser)),
		StartedAt: e.now(),
	}
	return e.advance(ctx, st)
}

// ErrStale says an observation does not match the pending action.
var ErrStale = errors.New("stale observation")

// Continue folds obs into st and takes the next step. An observation for a
// turn that is not pending returns ErrStale with the unchanged state; the
// caller re-publishes st's pending message.
func (e *Engine) Continue(ctx context.Context, st schemas.EpisodeState, obs schemas.Observation) (schemas.EpisodeState, Step, error) {
	return e.fold(st, obs, func(st schemas.EpisodeState) (schemas.EpisodeState, Step, error) { return e.advance(ctx, st) })
}

// Stop folds obs into st as Continue does (the turn is kept), then ends
// the episode as an infrastructure failure with msg instead of sampling
// the next step: its run was cancelled with --drop. An episode the
// observation ends anyway (accepted, sandbox error) ends as it would.
func (e *Engine) Stop(st schemas.EpisodeState, obs schemas.Observation, msg string) (schemas.EpisodeState, Step, error) {
	return e.fold(st, obs, func(st schemas.EpisodeState) (schemas.EpisodeState, Step, error) {
		return e.finish(st, schemas.EndInfraFailure, "", msg)
	})
}

// fold folds obs into st and takes the next step with next unless the
// observation ends the episode.
func (e *Engine) fold(st schemas.EpisodeState, obs schemas.Observation,
	next func(schemas.EpisodeState) (schemas.EpisodeState, Step, error)) (schemas.EpisodeState, Step, error) {
	if st.Result != nil || st.PendingAction == nil || st.PendingAction.Ref.Turn != obs.Ref.Turn {
		return st, Step{}, ErrStale
	}
	// Copy what is written below so the caller's st is never changed.
	st.Turns = slices.Clone(st.Turns)
	st.Messages = slices.Clip(st.Messages)
	t := &st.Turns[obs.Ref.Turn]
	r := obs.Result
	// What is stored (and shown to the model) is capped per observation,
	// with a marker and the full sizes recorded.
	t.Observation, t.ObservationBytes = schemas.CapStored(agent.ObservationMessage(r, obs.Check, st.Request.Options.ShowVerdict), 0)
	t.Stdout, t.StdoutBytes = schemas.CapStored(r.Stdout, r.StdoutBytes)
	t.Stderr, t.StderrBytes = schemas.CapStored(r.Stderr, r.StderrBytes)
	t.ExecStatus, t.ExitCode = r.Status, r.ExitCode
	t.Truncated, t.DurationMS = r.Truncated || t.Stdout != r.Stdout || t.Stderr != r.Stderr, r.DurationMS
	if len(r.Files) > 0 {
		// Keep output files on the latest turn only: the verifier re-checks
		// that one, and a trajectory must not grow by a copy per turn.
		for i := range st.Turns {
			st.Turns[i].Files = nil
		}
		t.Files = r.Files
	}
	if obs.Check != nil {
		t.Accepted = obs.Check.Accepted
	}
	st.Messages = append(st.Messages, schemas.ChatMessage{Role: "user", Content: t.Observation})
	st.PendingAction = nil
	if r.Status == schemas.StatusSandboxError {
		return e.finish(st, schemas.EndSandboxError, "", "sandbox failed: "+r.Message)
	}
	if obs.Check != nil && obs.Check.Accepted && st.Request.Options.EndOn != schemas.EndOnAnswer {
		return e.finish(st, schemas.EndAccepted, obs.Check.Answer, "")
	}
	return next(st)
}

// Resume takes the next policy step of an episode that awaits an outside
// reply (Step with neither Action nor Result, see ErrAwaitReply). A state
// with a pending action or a result returns ErrStale unchanged.
func (e *Engine) Resume(ctx context.Context, st schemas.EpisodeState) (schemas.EpisodeState, Step, error) {
	if st.Result != nil || st.PendingAction != nil {
		return st, Step{}, ErrStale
	}
	st.Turns = slices.Clip(st.Turns)
	st.Messages = slices.Clip(st.Messages)
	return e.advance(ctx, st)
}

// advance samples the policy until it yields an action for the sandbox or
// the episode ends. Parse failures, answers and debug calls are handled
// here without a sandbox round trip.
func (e *Engine) advance(ctx context.Context, st schemas.EpisodeState) (schemas.EpisodeState, Step, error) {
	req := st.Request
	// The episode's clock bounds every model call (and the debugger's):
	// the call is cancelled when it runs out.
	limit := e.clock(req.Options)
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if limit > 0 {
		cctx, cancel = context.WithTimeout(ctx, limit-e.now().Sub(st.StartedAt))
	}
	defer cancel()
	for {
		if len(st.Turns) >= req.Options.MaxTurns {
			if allParseErrors(st.Turns) {
				return e.finish(st, schemas.EndFormatError, "", "no turn produced a valid action")
			}
			if req.Options.Upstream() {
				// Upstream: no accepted execution in num_steps is a failure;
				// there is no final answer to grade.
				return e.finish(st, schemas.EndTurnLimit, "", "")
			}
			return e.finish(st, schemas.EndTurnLimit, lastAnswer(st.Turns), "")
		}
		if limit > 0 && e.now().Sub(st.StartedAt) > limit {
			return e.finish(st, schemas.EndTimeout, lastAnswer(st.Turns), fmt.Sprintf("episode exceeded %s", limit))
		}
		if n := agent.ConversationBytes(st.Messages); n > agent.MaxConversationBytes {
			return e.finish(st, schemas.EndTurnLimit, "", fmt.Sprintf("context overflow: the conversation is %d bytes, over the %d-byte cap", n, agent.MaxConversationBytes))
		}
		pol, err := e.Policy(req.Policy)
		if err != nil {
			return e.finish(st, schemas.EndInfraFailure, "", err.Error())
		}
		c, err := pol.Complete(cctx, req, st.Messages)
		if errors.Is(err, ErrAwaitReply) {
			return st, Step{}, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return st, Step{}, fmt.Errorf("policy step %d: %w", len(st.Turns), ctx.Err())
			}
			switch {
			case errors.Is(err, ErrContextOverflow):
				return e.finish(st, schemas.EndTurnLimit, "", fmt.Sprintf("context overflow: %v", err))
			case cctx.Err() != nil && !errors.Is(err, ErrUnavailable):
				return e.finish(st, schemas.EndTimeout, lastAnswer(st.Turns), fmt.Sprintf("episode exceeded %s waiting for the model: %v", limit, err))
			}
			return e.finish(st, schemas.EndInfraFailure, "", fmt.Sprintf("policy: %v", err))
		}
		idx := len(st.Turns)
		// A reply over the cap is kept capped (head and tail), is not
		// parsed, and keeps no token data (it would not match the text).
		text, perr := agent.CapReply(c.Text)
		reasoning, _ := schemas.CapText(c.Reasoning, 0, agent.MaxReplyBytes)
		t := schemas.Turn{
			Index: idx, RawText: text, Reasoning: reasoning, FinishReason: c.FinishReason,
			LLMLatencyMS: c.Latency.Milliseconds(), PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens,
			PromptTokenIDs: c.PromptTokenIDs, CompletionTokenIDs: c.TokenIDs, CompletionLogprobs: c.Logprobs,
		}
		st.Messages = append(st.Messages, schemas.ChatMessage{Role: "assistant", Content: text})
		var act schemas.Action
		if perr != nil {
			t.CompletionTokenIDs, t.CompletionLogprobs = nil, nil
		} else {
			act, perr = agent.Parse(text)
		}
		if perr != nil {
			t.ParseError = perr.Error()
			t.Observation = agent.ParseErrorMessage(perr)
			st.Turns = append(st.Turns, t)
			st.Messages = append(st.Messages, schemas.ChatMessage{Role: "user", Content: t.Observation})
			continue
		}
		t.ActionName, t.ParamsJSON = act.Name, string(act.Params)
		// answer is governed by EndOn (the prompt offers it whenever EndOn
		// allows it), not by the task's permitted actions.
		// Upstream executes any of its four actions, advertised or not.
		if act.Name != schemas.ActionAnswer && !permitted(req.Task, act.Name) &&
			!(req.Options.Upstream() && slices.Contains(agent.UpstreamActions, act.Name)) {
			t.Observation = fmt.Sprintf("Error: the action %q is not permitted for this task; permitted actions: %s.",
				act.Name, strings.Join(req.Task.PermittedActions, ", "))
			t.ExecStatus = schemas.StatusInfo // answered here, never executed
			st.Turns = append(st.Turns, t)
			st.Messages = append(st.Messages, schemas.ChatMessage{Role: "user", Content: t.Observation})
			continue
		}
		if repeated(st.Turns, act) {
			switch req.Options.LoopGuard {
			case "stop":
				t.Observation = "Stopped: the same action was repeated."
				st.Turns = append(st.Turns, t)
				return e.finish(st, schemas.EndLoop, lastAnswer(st.Turns), "repeated identical action")
			case "warn":
				t.Observation = "You repeated your previous action with the same parameters; its result will not change. Try a different approach."
				t.ExecStatus = schemas.StatusInfo
				st.Turns = append(st.Turns, t)
				st.Messages = append(st.Messages, schemas.ChatMessage{Role: "user", Content: t.Observation})
				continue
			}
		}
		switch act.Name {
		case schemas.ActionAnswer:
			st.Turns = append(st.Turns, t)
			if req.Options.EndOn == schemas.EndOnAccepted {
				st.Turns[idx].Observation = "Error: this run ends on an accepted code execution; the answer action is not available."
				st.Messages = append(st.Messages, schemas.ChatMessage{Role: "user", Content: st.Turns[idx].Observation})
				continue
			}
			return e.finish(st, schemas.EndAnswered, answerText(act.Params), "")
		case schemas.ActionDebug:
			t.Observation = e.debug(cctx, st, act)
			t.ExecStatus = schemas.StatusInfo
			st.Turns = append(st.Turns, t)
			st.Messages = append(st.Messages, schemas.ChatMessage{Role: "user", Content: t.Observation})
			continue
		}
		st.Turns = append(st.Turns, t)
		ar := schemas.ActionRequest{
			Ref: schemas.EpisodeRef{RunID: req.RunID, EpisodeID: req.EpisodeID, TaskID: req.Task.ID,
				Dataset: req.Task.Dataset, Split: req.Task.Split, Turn: idx},
			Action:     act,
			Resources:  req.Task.Resources,
			TimeoutSec: req.Options.ActionTimeoutSec,
			// A verdict ends the episode unless EndOn is "answer"; there it
			// is only wanted to be shown (ShowVerdict).
			Check:        act.Name == schemas.ActionValidateCode && (req.Options.EndOn != schemas.EndOnAnswer || req.Options.ShowVerdict),
			VerifierMode: req.Options.VerifierMode,
			LabelSets:    req.Options.LabelSets,
			Replay:       replayable(st.Turns[:idx]),
			OutputFiles:  req.Task.OutputFiles,
			Harness:      req.Task.Harness,
		}
		st.PendingAction = &ar
		return st, Step{Action: &ar}, nil
	}
}

// clock is the episode's time limit: its options', else DefaultTimeout.
func (e *Engine) clock(o schemas.EpisodeOptions) time.Duration {
	if o.EpisodeTimeoutSec > 0 {
		return time.Duration(o.EpisodeTimeoutSec) * time.Second
	}
	return e.DefaultTimeout
}

func (e *Engine) debug(ctx context.Context, st schemas.EpisodeState, act schemas.Action) string {
	if e.Debugger == nil {
		return "The debug action is not available in this run (no debugger model is configured). Please use validate_code."
	}
	var p struct {
		Code     string `json:"code"`
		ErrorMsg string `json:"error_msg"`
	}
	_ = json.Unmarshal(act.Params, &p) // Parse already validated the params
	out, err := e.Debugger.Debug(ctx, st.Request, st.Turns, p.Code, p.ErrorMsg)
	if err != nil {
		return "The debugger model could not be reached: " + err.Error()
	}
	return out + "\nPlease then use validate_code action to validate the debugged code."
}

func (e *Engine) finish(st schemas.EpisodeState, why schemas.Termination, answer, msg string) (schemas.EpisodeState, Step, error) {
	res := schemas.EpisodeResult{
		Request: st.Request, Turns: st.Turns, Messages: st.Messages,
		FinalAnswer: answer, Termination: why, Error: msg,
		StartedAt: st.StartedAt, FinishedAt: e.now(), Worker: e.Worker,
	}
	st.PendingAction = nil
	st.Result = &res
	return st, Step{Result: &res}, nil
}

func permitted(t schemas.TaskView, name string) bool {
	if len(t.PermittedActions) == 0 {
		return true
	}
	for _, a := range t.PermittedActions {
		if a == name {
			return true
		}
	}
	return false
}

// repeated reports whether act equals the previous turn's parsed action.
func repeated(turns []schemas.Turn, act schemas.Action) bool {
	if len(turns) == 0 {
		return false
	}
	p := turns[len(turns)-1]
	return p.ParseError == "" && p.ActionName == act.Name && bytes.Equal([]byte(p.ParamsJSON), act.Params)
}

func allParseErrors(turns []schemas.Turn) bool {
	for _, t := range turns {
		if t.ParseError == "" {
			return false
		}
	}
	return len(turns) > 0
}

// lastAnswer is the last non-empty stdout line of the last successful code run.
func lastAnswer(turns []schemas.Turn) string {
	for i := len(turns) - 1; i >= 0; i-- {
		t := turns[i]
		if t.ActionName == schemas.ActionValidateCode && t.ExecStatus == schemas.StatusOK {
			lines := strings.Split(strings.TrimSpace(t.Stdout), "\n")
			return strings.TrimSpace(lines[len(lines)-1])
		}
	}
	return ""
}

// replayable lists earlier actions that may have changed the workspace:
// every validate_code and terminal run a sandbox executed (its observation
// set the status), in order. A sandbox-worker counts on that: one whose
// workspace holds the first n replays only the rest (ActionRequest.Replay).
func replayable(turns []schemas.Turn) []schemas.Action {
	var out []schemas.Action
	for _, t := range turns {
		if t.ParseError == "" && t.ExecStatus != "" && t.ExecStatus != schemas.StatusInfo &&
			(t.ActionName == schemas.ActionValidateCode || t.ActionName == schemas.ActionTerminal) {
			out = append(out, schemas.Action{Name: t.ActionName, Params: []byte(t.ParamsJSON)})
		}
	}
	return out
}
