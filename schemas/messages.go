package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Version of the wire contract. Bump the minor on additive changes.
//
// 1.4: the termination EndClosed; DefaultOptions' EndOn is EndOnAnswer
// (before: EndOnBoth). EpisodeOptions.EndOn is always written, so a run
// spec or request of an older version keeps the rule it was made with.
const Version = "1.5"

// AnswerType says how a task's answer is checked.
type AnswerType string

// Answer types.
const (
	AnswerNumber  AnswerType = "number"  // float, checked against a range or tolerance
	AnswerInteger AnswerType = "integer" // exact integer
	AnswerDate    AnswerType = "date"    // calendar date, exact
	AnswerString  AnswerType = "string"  // normalised string equality
	AnswerList    AnswerType = "list"    // list or set of values
	AnswerBoolean AnswerType = "boolean"
	AnswerTuple   AnswerType = "tuple" // e.g. (weeks, days)
	// AnswerPredictions is a predictions file (TaskView.OutputFiles) scored
	// against gold labels (accuracy, optionally AUROC).
	AnswerPredictions AnswerType = "predictions"
	// AnswerOutput is the whole stdout of the task's program (TaskView.Harness
	// with the agent's code spliced in), compared exactly with the
	// reference program's (BioCoder).
	AnswerOutput AnswerType = "output"
)

// Outcome is the typed end of an episode.
type Outcome string

// Outcomes. InfraFailure is never the model's fault: it is excluded from
// success rates and RL rewards by default.
const (
	OutcomeCorrect      Outcome = "correct"
	OutcomeIncorrect    Outcome = "incorrect"
	OutcomeFormatError  Outcome = "format_error"
	OutcomeTimeout      Outcome = "timeout"
	OutcomeLoop         Outcome = "loop"
	OutcomeTurnLimit    Outcome = "turn_limit"
	OutcomeSandboxError Outcome = "sandbox_error"
	OutcomeInfraFailure Outcome = "infra_failure"
	// OutcomeAbstainedCorrectly and OutcomeAbstainedWrongly (since 1.2) end
	// an episode of a task that offers abstention (its ground truth says so) in
	// which the agent abstained with AbstainAnswer: correctly when the task
	// is unanswerable, wrongly when it has an answer. Readers of older rows
	// never meet them; every older outcome keeps its meaning.
	OutcomeAbstainedCorrectly Outcome = "abstained_correctly"
	OutcomeAbstainedWrongly   Outcome = "abstained_wrongly"
	// OutcomeAbandoned (since 1.3) ends an episode played through the
	// environment API whose client went away (its idle session was reaped)
	// or closed it before it was done. Like InfraFailure it says nothing
	// about the model: it is left out of success rates and training exports
	// (Outcome.Excluded). Readers of older rows never meet it.
	OutcomeAbandoned Outcome = "abandoned"
)

// AbstainAnswer is the reserved answer that abstains on a task that offers
// abstention (EHRSQL 2024's convention): the answer action with it, or, in
// upstream-compatible runs that have no answer action, a checked code run
// whose last printed line is it.
const AbstainAnswer = "null"

// Outcomes lists every outcome, for validation and reports.
var Outcomes = []Outcome{OutcomeCorrect, OutcomeIncorrect, OutcomeFormatError, OutcomeTimeout,
	OutcomeLoop, OutcomeTurnLimit, OutcomeSandboxError, OutcomeInfraFailure,
	OutcomeAbstainedCorrectly, OutcomeAbstainedWrongly, OutcomeAbandoned}

// Valid reports whether o is a known outcome.
func (o Outcome) Valid() bool {
	for _, x := range Outcomes {
		if o == x {
			return true
		}
	}
	return false
}

// Excluded reports whether o says nothing about the model and is left out
// of success rates, rewards and training exports: infra_failure (the
// infrastructure failed) and abandoned (the environment API's client went
// away).
func (o Outcome) Excluded() bool { return o == OutcomeInfraFailure || o == OutcomeAbandoned }

// Solved reports whether o is the task's correct outcome: a correct answer,
// or an abstention on a question the data cannot answer.
func (o Outcome) Solved() bool { return o == OutcomeCorrect || o == OutcomeAbstainedCorrectly }

// Reliability is the episode's score in EHRSQL 2024's reliability score
// (Lee et al. 2024) before the penalty: +1 when solved, 0 for an abstention
// on an answerable question, −1 for anything else (a wrong answer, an
// answer to an unanswerable question, no answer). RS(c) is the mean with
// each −1 multiplied by c. InfraFailure has no score (ok is false).
func (o Outcome) Reliability() (score int, ok bool) {
	switch {
	case o.Excluded():
		return 0, false
	case o.Solved():
		return 1, true
	case o == OutcomeAbstainedWrongly:
		return 0, true
	}
	return -1, true
}

// Termination says why the llm-worker ended an episode; the verifier turns
// it into an Outcome.
type Termination string

// Terminations.
const (
	EndAccepted     Termination = "accepted"      // a code execution was accepted by the verifier
	EndAnswered     Termination = "answered"      // the agent gave an explicit final answer
	EndTurnLimit    Termination = "turn_limit"    // max turns reached
	EndLoop         Termination = "loop"          // repeated identical action, loop guard stopped it
	EndFormatError  Termination = "format_error"  // every turn failed to parse (or policy gave up)
	EndTimeout      Termination = "timeout"       // per-episode wall clock exceeded
	EndInfraFailure Termination = "infra_failure" // model endpoint or bus failed beyond retries
	EndSandboxError Termination = "sandbox_error" // the sandbox itself failed (not the agent's code)
	// EndAbandoned (since 1.3): the environment API's client went away or
	// closed the session before the episode was done; scored abandoned.
	EndAbandoned Termination = "abandoned"
	// EndClosed (since 1.4): the environment API's client ended the
	// episode before it was done (DELETE on the session: its own turn or
	// length limit, the end of its rollout). Scored turn_limit with no
	// answer graded (reward 0), and kept in exports like any scored
	// episode; a reader of older rows never meets it.
	EndClosed Termination = "closed"
)

// Policy names.
const (
	PolicyOpenAI    = "openai"    // any OpenAI-compatible chat-completions endpoint
	PolicyReference = "reference" // replays the task's reference solution; no model involved
)

// End-of-episode rules (EpisodeOptions.EndOn).
const (
	EndOnAccepted = "accepted" // upstream: the first accepted code execution ends the episode
	EndOnAnswer   = "answer"   // only an explicit {"action":"answer"} ends the episode (the default)
	EndOnBoth     = "both"     // either ends it (the default before 1.4)
)

// TaskView is what the agent may see of a task: never the ground truth, never
// the reference solution.
type TaskView struct {
	ID          string     `json:"id"`
	Dataset     string     `json:"dataset"`
	Category    string     `json:"category"`
	Split       string     `json:"split"`
	Instruction string     `json:"instruction"`       // dataset-level instruction (system prompt part)
	Question    string     `json:"question"`          // the goal
	Context     string     `json:"context,omitempty"` // e.g. the patient note
	AnswerType  AnswerType `json:"answer_type"`
	// Resources are data paths relative to the task data root that the
	// sandbox mounts read-only under /data.
	Resources        []string `json:"resources,omitempty"`
	PermittedActions []string `json:"permitted_actions"`
	// OutputFiles are workspace-relative files the task asks the agent to
	// write (e.g. "predictions.csv"); the sandbox returns their contents
	// after each validate_code run (ExecResult.Files).
	OutputFiles []string `json:"output_files,omitempty"`
	// Harness, when set, is the program a validate_code action runs: the
	// action's code replaces every HarnessMarker in it (upstream BioCoder's
	// context code, never shown in the prompt).
	Harness string `json:"harness,omitempty"`
}

// HarnessMarker is where TaskView.Harness takes the agent's code
// (upstream's BioCoder marker).
const HarnessMarker = "<<insert solution here>>"

// Validate checks the fields every consumer relies on.
func (t TaskView) Validate() error {
	switch {
	case t.ID == "":
		return errors.New("task: id is empty")
	case t.Dataset == "":
		return fmt.Errorf("task %s: dataset is empty", t.ID)
	case t.Question == "":
		return fmt.Errorf("task %s: question is empty", t.ID)
	}
	return nil
}

// PolicySpec says which policy plays an episode. API keys never travel on
// the bus: APIKeyEnv names the environment variable the llm-worker reads.
type PolicySpec struct {
	Name        string   `json:"name"`
	Model       string   `json:"model"`
	BaseURL     string   `json:"base_url,omitempty"`
	APIKeyEnv   string   `json:"api_key_env,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	// Seed, when set, is sample 0's sampling seed; the dispatcher sends
	// sample k Seed+k, so the K samples of a task differ and each one is
	// reproducible.
	Seed     *int64   `json:"seed,omitempty"`
	Stop     []string `json:"stop,omitempty"`
	Logprobs bool     `json:"logprobs,omitempty"`
	// Version is the policy version the episode is sampled under (online RL).
	Version int `json:"version,omitempty"`
}

// Validate checks the policy.
func (p PolicySpec) Validate() error {
	switch p.Name {
	case PolicyReference:
	case PolicyOpenAI:
		if p.Model == "" {
			return errors.New("policy openai: model is empty")
		}
	default:
		return fmt.Errorf("policy: unknown name %q (want %q or %q)", p.Name, PolicyOpenAI, PolicyReference)
	}
	if p.Temperature != nil {
		if err := ValidTemperature(*p.Temperature); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
	}
	if p.TopP != nil && (math.IsNaN(*p.TopP) || *p.TopP <= 0 || *p.TopP > 1) {
		return fmt.Errorf("policy: top_p %g out of range (0, 1]", *p.TopP)
	}
	if p.MaxTokens < 0 {
		return fmt.Errorf("policy: max_tokens %d is negative", p.MaxTokens)
	}
	if HasUserinfo(p.BaseURL) {
		return fmt.Errorf("policy: base_url %s carries credentials; messages and stored state must not: give the API key through api_key_env (an environment variable or secret file read by the llm-worker)", RedactURL(p.BaseURL))
	}
	return nil
}

// MaxTemperature is the highest sampling temperature OpenAI-compatible
// servers accept.
const MaxTemperature = 2

// ValidTemperature checks a sampling temperature: a number in [0, 2].
func ValidTemperature(t float64) error {
	if math.IsNaN(t) || t < 0 || t > MaxTemperature {
		return fmt.Errorf("temperature %g out of range [0, %d]", t, MaxTemperature)
	}
	return nil
}

// EpisodeOptions are the per-run rules of an episode.
type EpisodeOptions struct {
	MaxTurns int `json:"max_turns"`
	// EndOn is EndOnAccepted (upstream), EndOnAnswer or EndOnBoth.
	EndOn string `json:"end_on"`
	// ShowVerdict feeds the verifier's verdict on code runs back to the
	// model (upstream never does).
	ShowVerdict bool `json:"show_verdict,omitempty"`
	// ActionTimeoutSec bounds one action's wall clock in the sandbox.
	ActionTimeoutSec int `json:"action_timeout_sec"`
	// EpisodeTimeoutSec bounds the whole episode (0 = none).
	EpisodeTimeoutSec int `json:"episode_timeout_sec,omitempty"`
	// LoopGuard is "off", "warn" (tell the model) or "stop" (end with loop).
	LoopGuard string `json:"loop_guard,omitempty"`
	// VerifierMode is "strict" (default) or "upstream".
	VerifierMode string `json:"verifier_mode,omitempty"`
	// Compat is "" (medgym's episode rules) or CompatUpstream: MedAgentGym's
	// episode rules as well as its verifier rules, to reproduce or refute a
	// paper number. It requires the other fields to be UpstreamOptions' and
	// changes what they cannot say: the prompt lists upstream's actions only
	// (with upstream's "exactly three" header), an action the task does not
	// advertise is still executed (upstream has no whitelist), and reaching
	// the turn limit is a failure whatever the last output. Absent in run
	// specs written before it; those keep medgym's rules.
	Compat string `json:"compat,omitempty"`
	// PromptMode is how the prompt asks for an action: "" (PromptModeJSON,
	// the default and upstream's: a JSON object as the reply's text) or
	// PromptModeTools (a call of one of the offered tools, for clients that
	// pass the actions to the model as OpenAI tools). The actions, their
	// checks and the refusal of one the task does not permit are the same.
	PromptMode string `json:"prompt_mode,omitempty"`
	// LabelSets chooses, per dataset, the label set the episode is scored
	// against ("medcalcbench@v1.0"; contract 1.5). A dataset not named
	// gets its default for VerifierMode: its corrected set under strict
	// rules, the benchmark's own labels under upstream rules. Which ids
	// exist is the task library's business (tasks.CheckLabelSets); here
	// only their shape is checked.
	LabelSets []string `json:"label_sets,omitempty"`
}

// MaxLabelSets bounds EpisodeOptions.LabelSets.
const MaxLabelSets = 64

// ValidLabelSetID reports whether id has a label set id's shape:
// "<dataset>@<name>", the dataset a token, the name at most 64 letters,
// digits, '.', '-' or '_' (not starting with '.').
func ValidLabelSetID(id string) bool {
	ds, name, ok := strings.Cut(id, "@")
	if !ok || !ValidToken(ds) || name == "" || len(name) > 64 || name[0] == '.' {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// The prompt modes of EpisodeOptions.PromptMode.
const (
	PromptModeJSON  = "json"
	PromptModeTools = "tools"
)

// CompatUpstream is EpisodeOptions.Compat for MedAgentGym's rules (upstream
// commit e1e639e, shared/notes/upstream.md).
const CompatUpstream = "upstream"

// DefaultOptions are medgym's defaults (upstream's 15 turns, 120 s actions).
//
// The episode ends only on an explicit answer (EndOnAnswer, since 1.4):
// no code run is checked before the agent commits, so an observation never
// says whether a printed value is the truth. Under EndOnAccepted or
// EndOnBoth every checked code run is a correctness oracle (an episode
// that keeps going tells the agent its value was wrong), which a policy
// trained on the reward learns to exploit by printing candidates until
// one ends the episode. Upstream's rule is UpstreamOptions.
func DefaultOptions() EpisodeOptions {
	return EpisodeOptions{MaxTurns: 15, EndOn: EndOnAnswer, ActionTimeoutSec: 120, LoopGuard: "warn", VerifierMode: "strict"}
}

// Bounds of the timeouts: one day per action, a week per episode. Larger
// values overflowed time.Duration (seconds × 10⁹ past 2⁶³ ns turned
// negative, which timed out every run at once).
const (
	MaxActionTimeoutSec  = 24 * 60 * 60
	MaxEpisodeTimeoutSec = 7 * 24 * 60 * 60
)

// UpstreamOptions are MedAgentGym's episode rules (Compat upstream): 15
// steps, the first accepted execution ends the episode, 120 s per code
// execution and no episode clock, no loop guard, no verdict shown, the
// upstream verifier rules.
func UpstreamOptions() EpisodeOptions {
	return EpisodeOptions{MaxTurns: 15, EndOn: EndOnAccepted, ActionTimeoutSec: 120, LoopGuard: "off",
		VerifierMode: "upstream", Compat: CompatUpstream}
}

// Upstream reports whether o asks for MedAgentGym's episode rules.
func (o EpisodeOptions) Upstream() bool { return o.Compat == CompatUpstream }

// Validate checks the options.
func (o EpisodeOptions) Validate() error {
	if o.MaxTurns < 1 || o.MaxTurns > 200 {
		return fmt.Errorf("options: max_turns %d out of range 1..200", o.MaxTurns)
	}
	switch o.EndOn {
	case EndOnAccepted, EndOnAnswer, EndOnBoth:
	default:
		return fmt.Errorf("options: end_on %q (want accepted, answer or both)", o.EndOn)
	}
	if o.ActionTimeoutSec < 1 || o.ActionTimeoutSec > MaxActionTimeoutSec {
		return fmt.Errorf("options: action_timeout_sec %d out of range 1..%d", o.ActionTimeoutSec, MaxActionTimeoutSec)
	}
	if o.EpisodeTimeoutSec < 0 || o.EpisodeTimeoutSec > MaxEpisodeTimeoutSec {
		return fmt.Errorf("options: episode_timeout_sec %d out of range 0..%d (0: none)", o.EpisodeTimeoutSec, MaxEpisodeTimeoutSec)
	}
	switch o.LoopGuard {
	case "", "off", "warn", "stop":
	default:
		return fmt.Errorf("options: loop_guard %q (want off, warn or stop)", o.LoopGuard)
	}
	switch o.VerifierMode {
	case "", "strict", "upstream":
	default:
		return fmt.Errorf("options: verifier_mode %q (want strict or upstream)", o.VerifierMode)
	}
	if len(o.LabelSets) > MaxLabelSets {
		return fmt.Errorf("options: %d label_sets (at most %d)", len(o.LabelSets), MaxLabelSets)
	}
	for _, id := range o.LabelSets {
		if !ValidLabelSetID(id) {
			return fmt.Errorf("options: label set %q (want <dataset>@<name>)", id)
		}
	}
	switch o.PromptMode {
	case "", PromptModeJSON, PromptModeTools:
	default:
		return fmt.Errorf("options: prompt_mode %q (want %s or %s)", o.PromptMode, PromptModeJSON, PromptModeTools)
	}
	switch o.Compat {
	case "":
	case CompatUpstream:
		if o.PromptMode == PromptModeTools {
			return fmt.Errorf("options: compat upstream requires prompt_mode %s (upstream's prompt), got %s", PromptModeJSON, o.PromptMode)
		}
		u := UpstreamOptions()
		for _, c := range []struct {
			field     string
			got, want any
		}{
			{"max_turns", o.MaxTurns, u.MaxTurns}, {"end_on", o.EndOn, u.EndOn},
			{"show_verdict", o.ShowVerdict, u.ShowVerdict}, {"action_timeout_sec", o.ActionTimeoutSec, u.ActionTimeoutSec},
			{"episode_timeout_sec", o.EpisodeTimeoutSec, u.EpisodeTimeoutSec}, {"loop_guard", o.LoopGuard, u.LoopGuard},
			{"verifier_mode", o.VerifierMode, u.VerifierMode},
		} {
			if c.got != c.want {
				return fmt.Errorf("options: compat upstream requires %s %v (upstream's rule), got %v", c.field, c.want, c.got)
			}
		}
	default:
		return fmt.Errorf("options: compat %q (want \"\" or %q)", o.Compat, CompatUpstream)
	}
	return nil
}

// EpisodeRequest asks for one episode: one task, one sample.
type EpisodeRequest struct {
	RunID       string         `json:"run_id"`
	EpisodeID   string         `json:"episode_id"`
	SampleIndex int            `json:"sample_index"`
	Task        TaskView       `json:"task"`
	Policy      PolicySpec     `json:"policy"`
	Options     EpisodeOptions `json:"options"`
	RequestedAt time.Time      `json:"requested_at"`
	// Attempt counts restarts of this episode (0 for the first).
	Attempt int `json:"attempt,omitempty"`
}

// Validate checks the request.
func (r EpisodeRequest) Validate() error {
	if !ValidToken(r.RunID) {
		return fmt.Errorf("episode request: run_id %q is not a valid token", r.RunID)
	}
	if !ValidToken(r.EpisodeID) {
		return fmt.Errorf("episode request: episode_id %q is not a valid token", r.EpisodeID)
	}
	if err := r.Task.Validate(); err != nil {
		return fmt.Errorf("episode request %s: %w", r.EpisodeID, err)
	}
	if err := r.Policy.Validate(); err != nil {
		return fmt.Errorf("episode request %s: %w", r.EpisodeID, err)
	}
	if err := r.Options.Validate(); err != nil {
		return fmt.Errorf("episode request %s: %w", r.EpisodeID, err)
	}
	return nil
}

// Action is one agent action in upstream's contract:
// {"action": "validate_code", "params": {"code": "..."}}.
type Action struct {
	Name   string          `json:"action"`
	Params json.RawMessage `json:"params"`
}

// Action names. Answer is medgym's explicit final answer.
const (
	ActionValidateCode = "validate_code"
	ActionTerminal     = "terminal"
	ActionRequestInfo  = "request_info"
	ActionDebug        = "debug"
	ActionAnswer       = "answer"
)

// EpisodeRef identifies one turn of one episode on the bus.
type EpisodeRef struct {
	RunID     string `json:"run_id"`
	EpisodeID string `json:"episode_id"`
	TaskID    string `json:"task_id"`
	Dataset   string `json:"dataset"`
	Split     string `json:"split,omitempty"`
	Turn      int    `json:"turn"`
}

// Validate checks the reference.
func (e EpisodeRef) Validate() error {
	if !ValidToken(e.RunID) || !ValidToken(e.EpisodeID) {
		return fmt.Errorf("episode ref: run_id %q / episode_id %q are not valid tokens", e.RunID, e.EpisodeID)
	}
	if e.TaskID == "" || e.Dataset == "" {
		return fmt.Errorf("episode ref %s: task_id and dataset are required", e.EpisodeID)
	}
	if e.Turn < 0 {
		return fmt.Errorf("episode ref %s: negative turn", e.EpisodeID)
	}
	return nil
}

// ActionRequest asks a sandbox worker to execute one action.
type ActionRequest struct {
	Ref    EpisodeRef `json:"ref"`
	Action Action     `json:"action"`
	// Resources to mount read-only (relative to the task data root).
	Resources  []string `json:"resources,omitempty"`
	TimeoutSec int      `json:"timeout_sec"`
	// Check asks the verifier to check this execution's output against the
	// ground truth (EndOn accepted/both, code actions only).
	Check        bool   `json:"check"`
	VerifierMode string `json:"verifier_mode,omitempty"`
	// LabelSets is the episode's EpisodeOptions.LabelSets, for the check.
	LabelSets []string `json:"label_sets,omitempty"`
	// Replay lists the earlier actions of the episode that touched the
	// workspace (validate_code and terminal runs), in order: every one a
	// sandbox ran appears in every later request's list. A worker that
	// lacks the workspace rebuilds it from the list; one whose workspace
	// holds the first n entries replays the rest (other workers ran them).
	Replay []Action `json:"replay,omitempty"`
	// OutputFiles are workspace-relative files to return after a
	// validate_code run (copied from TaskView.OutputFiles).
	OutputFiles []string `json:"output_files,omitempty"`
	// Harness is TaskView.Harness: a validate_code action (and its replays)
	// runs the harness with the code in place of HarnessMarker.
	Harness string `json:"harness,omitempty"`
}

// Validate checks the request.
func (a ActionRequest) Validate() error {
	if err := a.Ref.Validate(); err != nil {
		return err
	}
	if a.Action.Name == "" {
		return fmt.Errorf("action request %s/%d: action name is empty", a.Ref.EpisodeID, a.Ref.Turn)
	}
	if a.TimeoutSec < 1 || a.TimeoutSec > MaxActionTimeoutSec {
		return fmt.Errorf("action request %s/%d: timeout_sec %d out of range 1..%d", a.Ref.EpisodeID, a.Ref.Turn, a.TimeoutSec, MaxActionTimeoutSec)
	}
	return nil
}

// Exec status values.
const (
	StatusOK           = "ok"            // exit code 0
	StatusError        = "error"         // non-zero exit or compile error
	StatusTimeout      = "timeout"       // wall-clock or CPU limit hit
	StatusKilled       = "killed"        // memory/pids limit or signal
	StatusSandboxError = "sandbox_error" // the sandbox failed, not the code
	StatusInfo         = "info"          // non-execution action (request_info, debug)
)

// ExecResult is what running one action produced.
type ExecResult struct {
	Status    string `json:"status"`
	ExitCode  int    `json:"exit_code"`
	Signal    string `json:"signal,omitempty"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	// StdoutBytes and StderrBytes are the sizes the run wrote, before the
	// sandbox's output cap (0 from workers older than contract 1.2).
	StdoutBytes     int64 `json:"stdout_bytes,omitempty"`
	StderrBytes     int64 `json:"stderr_bytes,omitempty"`
	DurationMS      int64 `json:"duration_ms"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes,omitempty"`
	// Message is the observation text the model is shown (upstream's
	// env_message): stdout, then stderr, or an explanation.
	Message string `json:"message"`
	// Files holds the contents of the requested output files
	// (ActionRequest.OutputFiles) after a validate_code run, keyed by the
	// requested path; absent or unreadable files are omitted. Each is at
	// most MaxOutputFileBytes.
	Files map[string]string `json:"files,omitempty"`
}

// MaxOutputFileBytes caps one file in ExecResult.Files.
const MaxOutputFileBytes = 2 << 20

// MaxStoredOutputBytes caps each of a turn's Stdout, Stderr and Observation
// as the llm-worker stores them (and shows the observation to the model):
// the first and last halves are kept around a marker that gives the full
// size, which the turn also records. Episode state and results are kept
// under the server's max payload by the bus (offload to the blob store),
// whatever the number of turns.
const MaxStoredOutputBytes = 32 << 10

// Check is the verifier's verdict on one code execution.
type Check struct {
	Accepted        bool   `json:"accepted"`
	Answer          string `json:"answer"`
	Verdict         string `json:"verdict"`
	VerifierVersion string `json:"verifier_version"`
}

// Observation is the result of one action, produced by a sandbox worker and
// passed on (with Check filled when asked) by the verifier.
type Observation struct {
	Ref          EpisodeRef `json:"ref"`
	Action       string     `json:"action"`
	Result       ExecResult `json:"result"`
	CheckWanted  bool       `json:"check_wanted"`
	VerifierMode string     `json:"verifier_mode,omitempty"`
	LabelSets    []string   `json:"label_sets,omitempty"`
	Check        *Check     `json:"check,omitempty"`
	Worker       string     `json:"worker,omitempty"`
}

// Validate checks the observation.
func (o Observation) Validate() error {
	if err := o.Ref.Validate(); err != nil {
		return err
	}
	if o.Result.Status == "" {
		return fmt.Errorf("observation %s/%d: result status is empty", o.Ref.EpisodeID, o.Ref.Turn)
	}
	return nil
}

// ChatMessage is one OpenAI-style chat message.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Turn records one policy step: what the model said, what was parsed, what
// the sandbox returned.
type Turn struct {
	Index        int    `json:"index"`
	RawText      string `json:"raw_text"`
	Reasoning    string `json:"reasoning,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
	ActionName   string `json:"action_name"`
	ParamsJSON   string `json:"params_json"`
	ParseError   string `json:"parse_error,omitempty"`
	Observation  string `json:"observation"`
	ExecStatus   string `json:"exec_status,omitempty"`
	ExitCode     int    `json:"exit_code"`
	Stdout       string `json:"stdout,omitempty"`
	Stderr       string `json:"stderr,omitempty"`
	Truncated    bool   `json:"truncated,omitempty"`
	// StdoutBytes, StderrBytes and ObservationBytes are the full sizes of
	// Stdout, Stderr and Observation before any cap (the sandbox's, then
	// MaxStoredOutputBytes); 0 in turns recorded before contract 1.2.
	StdoutBytes      int64 `json:"stdout_bytes,omitempty"`
	StderrBytes      int64 `json:"stderr_bytes,omitempty"`
	ObservationBytes int64 `json:"observation_bytes,omitempty"`
	Accepted         bool  `json:"accepted,omitempty"`
	// Files are the task's output files after this turn's run
	// (ExecResult.Files). The llm-worker keeps them on the latest code turn
	// only, so a trajectory carries at most one copy.
	Files        map[string]string `json:"files,omitempty"`
	DurationMS   int64             `json:"duration_ms"`
	LLMLatencyMS int64             `json:"llm_latency_ms"`

	PromptTokens       int       `json:"prompt_tokens"`
	CompletionTokens   int       `json:"completion_tokens"`
	PromptTokenIDs     []int32   `json:"prompt_token_ids,omitempty"`
	CompletionTokenIDs []int32   `json:"completion_token_ids,omitempty"`
	CompletionLogprobs []float32 `json:"completion_logprobs,omitempty"`
}

// EpisodeState is the llm-worker's state of an episode after each completed
// turn, kept in the BucketEpisodes key-value bucket so any worker can resume.
type EpisodeState struct {
	Request   EpisodeRequest `json:"request"`
	Messages  []ChatMessage  `json:"messages"`
	Turns     []Turn         `json:"turns"`
	StartedAt time.Time      `json:"started_at"`
	// PendingAction is the action out at a sandbox worker, if any. It is
	// saved before it is published, so a redelivered observation re-publishes
	// it (deduplicated by Nats-Msg-Id) instead of sampling the policy again.
	PendingAction *ActionRequest `json:"pending_action,omitempty"`
	// Result is set once the episode is over; it is re-published the same way.
	Result *EpisodeResult `json:"result,omitempty"`
}

// Validate checks the state.
func (s EpisodeState) Validate() error { return s.Request.Validate() }

// EpisodeResult is a finished episode, before scoring.
type EpisodeResult struct {
	Request     EpisodeRequest `json:"request"`
	Turns       []Turn         `json:"turns"`
	Messages    []ChatMessage  `json:"messages"`
	FinalAnswer string         `json:"final_answer"`
	Termination Termination    `json:"termination"`
	Error       string         `json:"error,omitempty"`
	StartedAt   time.Time      `json:"started_at"`
	FinishedAt  time.Time      `json:"finished_at"`
	Worker      string         `json:"worker,omitempty"`
}

// Validate checks the result.
func (r EpisodeResult) Validate() error {
	if err := r.Request.Validate(); err != nil {
		return err
	}
	if r.Termination == "" {
		return fmt.Errorf("episode result %s: termination is empty", r.Request.EpisodeID)
	}
	return nil
}

// Score is the verifier's final word on an episode, published after the
// trajectory row is durably stored.
type Score struct {
	RunID           string  `json:"run_id"`
	EpisodeID       string  `json:"episode_id"`
	TaskID          string  `json:"task_id"`
	Dataset         string  `json:"dataset"`
	Category        string  `json:"category,omitempty"`
	SampleIndex     int     `json:"sample_index"`
	PolicyVersion   int     `json:"policy_version,omitempty"`
	Outcome         Outcome `json:"outcome"`
	Reward          float64 `json:"reward"`
	NumTurns        int     `json:"num_turns"`
	VerifierVersion string  `json:"verifier_version"`
	// LabelSet is the label set the episode was scored against (contract
	// 1.5; "" from older verifiers).
	LabelSet string `json:"label_set,omitempty"`
	Object   string `json:"object,omitempty"`
	// Store is the trajectory store the row was written to: a directory's
	// absolute path or s3://bucket/prefix (contract 1.2), so a CLI that
	// submitted the run over --nats reads the rows where they are.
	Store    string    `json:"store,omitempty"`
	ScoredAt time.Time `json:"scored_at"`
}

// Validate checks the score.
func (s Score) Validate() error {
	if !ValidToken(s.RunID) || !ValidToken(s.EpisodeID) {
		return fmt.Errorf("score: run_id %q / episode_id %q are not valid tokens", s.RunID, s.EpisodeID)
	}
	if !s.Outcome.Valid() {
		return fmt.Errorf("score %s: unknown outcome %q", s.EpisodeID, s.Outcome)
	}
	return nil
}

// RunSpec asks the dispatcher for a run: tasks × samples under one policy.
type RunSpec struct {
	RunID    string   `json:"run_id"`
	Datasets []string `json:"datasets"`
	Split    string   `json:"split"`
	// TasksDir, when set, loads upstream-format task folders instead of the
	// built-in library.
	TasksDir   string   `json:"tasks_dir,omitempty"`
	Categories []string `json:"categories,omitempty"`
	TaskIDs    []string `json:"task_ids,omitempty"`
	Limit      int      `json:"limit,omitempty"`
	SampleSeed int64    `json:"sample_seed,omitempty"` // 0: first Limit tasks in order; else a seeded sample
	Samples    int      `json:"samples"`               // K samples per task
	// Temperatures is the per-sample temperature schedule: sample k uses
	// Temperatures[min(k, len-1)] (upstream: [0, 0.6]).
	Temperatures []float64      `json:"temperatures,omitempty"`
	Policy       PolicySpec     `json:"policy"`
	Options      EpisodeOptions `json:"options"`
	// MaxInFlight bounds the episodes admitted at once (0 = 64).
	MaxInFlight int       `json:"max_in_flight,omitempty"`
	SubmittedAt time.Time `json:"submitted_at"`
}

// Validate checks the spec.
func (r RunSpec) Validate() error {
	if !ValidToken(r.RunID) {
		return fmt.Errorf("run spec: run_id %q is not a valid token (letters, digits, - and _)", r.RunID)
	}
	if len(r.Datasets) == 0 {
		return fmt.Errorf("run spec %s: no dataset", r.RunID)
	}
	if r.Samples < 1 {
		return fmt.Errorf("run spec %s: samples must be ≥ 1", r.RunID)
	}
	if r.Limit < 0 {
		return fmt.Errorf("run spec %s: limit %d is negative (0 means every task)", r.RunID, r.Limit)
	}
	if r.MaxInFlight < 0 {
		return fmt.Errorf("run spec %s: max_in_flight %d is negative (0 means the default)", r.RunID, r.MaxInFlight)
	}
	for _, t := range r.Temperatures {
		if err := ValidTemperature(t); err != nil {
			return fmt.Errorf("run spec %s: temperatures: %w", r.RunID, err)
		}
	}
	if err := r.Policy.Validate(); err != nil {
		return fmt.Errorf("run spec %s: %w", r.RunID, err)
	}
	if err := r.Options.Validate(); err != nil {
		return fmt.Errorf("run spec %s: %w", r.RunID, err)
	}
	return nil
}

// RunStatus is the dispatcher's record of a run (BucketRuns). Which
// episodes are done is recorded apart, in BucketCompletions.
type RunStatus struct {
	Spec      RunSpec `json:"spec"`
	Total     int     `json:"total"`
	Published int     `json:"published"`
	// Done counts the distinct planned episodes among the published ones
	// that have a score.
	Done     int    `json:"done"`
	Finished bool   `json:"finished"`
	Error    string `json:"error,omitempty"`
	// Cancel, set by `medgym cancel`, asks the dispatcher to stop the run:
	// CancelDrain (publish nothing more, let the episodes in flight finish)
	// or CancelDrop (publish nothing more, withdraw the requests no worker
	// took yet, and finish the run now).
	Cancel string `json:"cancel,omitempty"`
	// Cancelled is set with Finished when the run ended by a Cancel.
	Cancelled bool      `json:"cancelled,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Cancel modes of RunStatus.Cancel.
const (
	CancelDrain = "drain"
	CancelDrop  = "drop"
)

// PolicyVersion announces a new policy (online RL).
type PolicyVersion struct {
	Version   int       `json:"version"`
	Model     string    `json:"model"`
	Adapter   string    `json:"adapter,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Validate checks an announcement: a version ≥ 1 of a named model.
func (p PolicyVersion) Validate() error {
	if p.Version < 1 || p.Model == "" {
		return fmt.Errorf("policy version %d of model %q: want version ≥ 1 and a model", p.Version, p.Model)
	}
	return nil
}

// Validator is implemented by every message type.
type Validator interface{ Validate() error }

// Decode unmarshals data into v and validates it. The error names the type
// and, for JSON errors, the offset.
func Decode[T Validator](data []byte) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("decode %T: %w", v, err)
	}
	if err := v.Validate(); err != nil {
		return v, fmt.Errorf("decode %T: %w", v, err)
	}
	return v, nil
}

// Encode marshals v after validating it.
func Encode(v Validator) ([]byte, error) {
	if err := v.Validate(); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return b, nil
}
