package train

import (
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
)

// Message is one chat message in the layout TRL and LLaMA-Factory read.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Roles of exported messages.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Episode is a stored row seen as a conversation: the prompt (system and
// the goal), then one assistant message per policy turn, each followed by
// its observation.
type Episode struct {
	Row *parquet.Row
	// Prompt is every message before the first assistant message.
	Prompt []Message
	// Steps are the policy turns in order; Steps[k] belongs to Row.Turns[k]
	// when Aligned.
	Steps []Step
	// Aligned reports that there is one assistant message per recorded turn.
	Aligned bool
	// SameContext reports that the rendered messages are exactly those the
	// model was sent when the episode was sampled (no role was renamed), so
	// the sampler's token ids and logprobs belong to this context.
	SameContext bool
}

// Step is one assistant message and the observations that followed it.
type Step struct {
	Action       Message
	Observations []Message
}

// Success reports whether the episode reached the task's correct outcome
// (a correct answer, or a correct abstention).
func (e *Episode) Success() bool { return schemas.Outcome(e.Row.Outcome).Solved() }

// TaskKey identifies a task: DPO pairs and GRPO groups never cross it.
func (e *Episode) TaskKey() string { return TaskKey(e.Row) }

// TaskKey identifies the task of a row (dataset, split, task id).
func TaskKey(r *parquet.Row) string { return r.Dataset + "/" + r.Split + "/" + r.TaskID }

// Tokens is the episode's total token count, or, when the endpoint reported
// no usage, its message characters / 4 (a rough stand-in used for ordering
// and the data card only).
func (e *Episode) Tokens() int64 {
	if n := e.Row.PromptTokens + e.Row.CompletionTokens; n > 0 {
		return n
	}
	var c int64
	for _, m := range e.Row.Messages {
		c += int64(len(m.Content))
	}
	return c / 4
}

// Observation roles an export may ask for.
const (
	// ObsSampled renders observations with the role they were sent to the
	// model with (Row.ObsRole): the context the episode was sampled in.
	ObsSampled = "sampled"
)

// NewEpisode splits a row's messages into prompt and steps. Observation
// messages keep the role they were sampled with when obsRole is "" or
// "sampled" (the default: train on the context the model saw); "tool" or
// "user" renames them (LLaMA-Factory's observation tag and TRL's tool
// messages, or plain user turns), and SameContext then reports whether the
// rendering still equals what the model was sent.
func NewEpisode(r *parquet.Row, obsRole string) *Episode {
	sampled := r.ObsRole()
	if obsRole == "" || obsRole == ObsSampled {
		obsRole = sampled
	}
	e := &Episode{Row: r, SameContext: true}
	for _, m := range r.Messages {
		switch {
		case m.Role == RoleAssistant:
			e.Steps = append(e.Steps, Step{Action: Message{RoleAssistant, m.Content}})
		case len(e.Steps) == 0:
			e.Prompt = append(e.Prompt, Message{m.Role, m.Content})
		default:
			role := m.Role
			if role == RoleUser || role == RoleTool {
				role = obsRole
			}
			if role != m.Role {
				e.SameContext = false
			}
			s := &e.Steps[len(e.Steps)-1]
			s.Observations = append(s.Observations, Message{role, m.Content})
		}
	}
	e.Aligned = len(e.Steps) == len(r.Turns)
	return e
}

// Conversation returns the prompt and the first n steps; the observations
// of the last included step are kept only when withLastObs is set. The
// loss mask is 1 on assistant turns, except turns that failed to parse
// when maskFormatErrors is set.
func (e *Episode) Conversation(n int, withLastObs bool) (msgs []Message, lossMask []int8) {
	return e.conversation(n, withLastObs, false)
}

// FormatError reports whether step k's action failed to parse.
func (e *Episode) FormatError(k int) bool {
	return e.Aligned && k < len(e.Row.Turns) && e.Row.Turns[k].ParseError != ""
}

func (e *Episode) conversation(n int, withLastObs, maskFormatErrors bool) (msgs []Message, lossMask []int8) {
	for _, m := range e.Prompt {
		msgs, lossMask = append(msgs, m), append(lossMask, 0)
	}
	for k := 0; k < n && k < len(e.Steps); k++ {
		var w int8 = 1
		if maskFormatErrors && e.FormatError(k) {
			w = 0
		}
		msgs, lossMask = append(msgs, e.Steps[k].Action), append(lossMask, w)
		if k < n-1 || withLastObs {
			for _, o := range e.Steps[k].Observations {
				msgs, lossMask = append(msgs, o), append(lossMask, 0)
			}
		}
	}
	return msgs, lossMask
}

// FinalStep is the index of the step the verifier accepted: the last
// accepted turn of an aligned successful episode, else the last step.
func (e *Episode) FinalStep() int {
	if e.Aligned {
		for k := len(e.Row.Turns) - 1; k >= 0; k-- {
			if e.Row.Turns[k].Accepted {
				return k
			}
		}
	}
	return len(e.Steps) - 1
}

// failedAttempt reports whether a turn was an attempt that went wrong: an
// unparseable action, a crashed or timed-out run, or code the verifier did
// not accept. Information actions (request_info, debug) are not attempts.
func failedAttempt(t parquet.Turn) bool {
	if t.ParseError != "" {
		return true
	}
	switch t.ExecStatus {
	case schemas.StatusError, schemas.StatusTimeout, schemas.StatusKilled:
		return true
	}
	return t.Action == schemas.ActionValidateCode && !t.Accepted
}
