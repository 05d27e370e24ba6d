package agent

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/medgym/medgym/schemas"
)

// DataRoot is where the sandbox mounts a task's resources, read-only.
const DataRoot = "/data"

// PromptOptions change how BuildMessages lays out the prompt.
type PromptOptions struct {
	// SystemAsUser puts the system text at the start of the first user
	// message instead of a system message (upstream does this for vLLM
	// models, whose chat templates may lack a system role).
	SystemAsUser bool
	// AllowAnswer advertises medgym's explicit {"action": "answer"} action.
	AllowAnswer bool
	// Upstream lays the prompt out exactly as MedAgentGym does
	// (EpisodeOptions.Compat upstream): its action header, which says
	// "exactly three different actions" whatever the number listed. It
	// excludes AllowAnswer.
	Upstream bool
	// ToolCalls describes the actions as the tools the client offers the
	// model (Tools) and asks for one tool call per reply, instead of the
	// JSON reply format (EpisodeOptions.PromptMode tools). It excludes
	// Upstream.
	ToolCalls bool
}

// EpisodePromptOptions are the PromptOptions an episode with opts gets: the
// one place that says how episode options shape the prompt, shared by the
// episode engine and the dataset exports (`medgym export`), so an exported
// prompt is the prompt a session for the same task and options starts with.
func EpisodePromptOptions(opts schemas.EpisodeOptions, systemAsUser bool) PromptOptions {
	return PromptOptions{SystemAsUser: systemAsUser, AllowAnswer: opts.EndOn != schemas.EndOnAccepted, Upstream: opts.Upstream(),
		ToolCalls: opts.PromptMode == schemas.PromptModeTools && !opts.Upstream()}
}

// actionSpec is the prompt text of one action.
type actionSpec struct {
	name     string
	params   string // "name (type), ..."
	purpose  string
	feedback string
	template string // the JSON response template
}

var actionSpecs = map[string]actionSpec{
	schemas.ActionRequestInfo: {
		name:     schemas.ActionRequestInfo,
		params:   `data_path (string: a data file or directory), info_type (string: "column_names", "column_values" or "term"), keyterm (string: a column name for column_values, a term to look up for term, "" for column_names)`,
		purpose:  "Request information about the data: the column names of a table, the values of a column, or where a term occurs.",
		feedback: "the requested information.",
		template: `{"action": "request_info", "params": {"data_path": "<data_path>", "info_type": "<info_type>", "keyterm": "<keyterm>"}}`,
	},
	schemas.ActionValidateCode: {
		name:     schemas.ActionValidateCode,
		params:   "code (string: a complete Python program)",
		purpose:  "Run Python code to check intermediate results or to compute the final answer.",
		feedback: "the program's output (stdout, then stderr), or the error it raised.",
		template: `{"action": "validate_code", "params": {"code": "<code>"}}`,
	},
	schemas.ActionDebug: {
		name:     schemas.ActionDebug,
		params:   "code (string: the failing Python code), error_msg (string: the error it produced)",
		purpose:  "Ask for help with code that fails: an explanation of the error and a suggested fix.",
		feedback: "an explanation of the problem and a suggested fix.",
		template: `{"action": "debug", "params": {"code": "<code>", "error_msg": "<error_msg>"}}`,
	},
	schemas.ActionTerminal: {
		name:     schemas.ActionTerminal,
		params:   "cmd (string: a shell command)",
		purpose:  "Run a shell command, e.g. to list files or inspect the environment.",
		feedback: "the command's output.",
		template: `{"action": "terminal", "params": {"cmd": "<cmd>"}}`,
	},
	schemas.ActionAnswer: {
		name:     schemas.ActionAnswer,
		params:   "answer (the final answer: a string, number, boolean or list)",
		purpose:  "Submit the final answer to the question. This ends the task.",
		feedback: "none: the task ends and the answer is graded.",
		template: `{"action": "answer", "params": {"answer": <answer>}}`,
	},
}

// UpstreamActions are MedAgentGym's four actions, in the order its prompts
// list them.
var UpstreamActions = []string{schemas.ActionRequestInfo, schemas.ActionValidateCode, schemas.ActionDebug, schemas.ActionTerminal}

// upstreamOrder is the order actions are listed in when a task permits them.
var upstreamOrder = UpstreamActions

// Actions returns the actions a prompt for task advertises, in a fixed
// order: the task's known permitted actions (validate_code alone when it
// lists none), then answer when opt.AllowAnswer.
func Actions(task schemas.TaskView, opt PromptOptions) []string {
	var out []string
	for _, a := range upstreamOrder {
		if slices.Contains(task.PermittedActions, a) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = []string{schemas.ActionValidateCode}
	}
	if opt.AllowAnswer && !opt.Upstream {
		out = append(out, schemas.ActionAnswer)
	}
	return out
}

// BuildMessages returns the opening messages of an episode: a system
// message (the task's instruction, the permitted actions, the code
// requirements and the strict response format) and a first user message
// (the question, its context and the data location). With SystemAsUser the
// two are one user message.
func BuildMessages(task schemas.TaskView, opt PromptOptions) []schemas.ChatMessage {
	system := SystemPrompt(task, opt)
	goal := Goal(task)
	if opt.SystemAsUser {
		return []schemas.ChatMessage{{Role: "user", Content: system + "\n\n" + goal}}
	}
	return []schemas.ChatMessage{{Role: "system", Content: system}, {Role: "user", Content: goal}}
}

// SystemPrompt is the system text of BuildMessages.
func SystemPrompt(task schemas.TaskView, opt PromptOptions) string {
	actions := Actions(task, opt)
	var b strings.Builder
	if s := strings.TrimSpace(task.Instruction); s != "" {
		b.WriteString(s)
		b.WriteString("\n\n")
	}
	toolCalls := opt.ToolCalls && !opt.Upstream
	switch {
	case opt.Upstream:
		b.WriteString("You are allowed to take exactly three different actions:\n")
	case toolCalls && len(actions) == 1:
		b.WriteString("You are allowed to take the following action, a tool you call:\n")
	case toolCalls:
		fmt.Fprintf(&b, "You are allowed to take the following %s actions, each a tool you call:\n", number(len(actions)))
	case len(actions) == 1:
		b.WriteString("You are allowed to take the following action:\n")
	default:
		fmt.Fprintf(&b, "You are allowed to take the following %s actions:\n", number(len(actions)))
	}
	for i, a := range actions {
		s := actionSpecs[a]
		fmt.Fprintf(&b, "%d. %s: %s\n   Parameters: %s.\n   Feedback: %s\n", i+1, s.name, s.purpose, s.params, s.feedback)
	}

	b.WriteString("\nCode requirements:\n")
	if slices.Contains(actions, schemas.ActionRequestInfo) {
		b.WriteString("- Request all the information you need about the data first, then write the code.\n")
	} else {
		b.WriteString("- Find out what you need (e.g. by inspecting the data in small steps) before writing the final code.\n")
	}
	b.WriteString("- Store the final result in a variable named `answer`.\n")
	b.WriteString("- Each program runs on its own in a fresh Python process: make it self-contained (imports, data loading, every definition it uses).\n")
	b.WriteString("- Print the answer at the end, e.g. `print(answer)`.\n")
	if slices.Contains(actions, schemas.ActionAnswer) {
		b.WriteString("- When you are confident, submit the final answer with the answer action.\n")
	}

	if toolCalls {
		b.WriteString("\nResponse format requirements:\n")
		fmt.Fprintf(&b, "- Each reply calls exactly one of the tools %s, with the parameters listed above.\n", strings.Join(actions, ", "))
		b.WriteString("- Only these tools exist: a call of any other is refused.\n")
		b.WriteString("- The tool's result comes back as the next message.")
		return b.String()
	}
	b.WriteString("\nResponse format requirements, strictly one of the following:\n")
	for i, a := range actions {
		if i > 0 {
			b.WriteString("or\n")
		}
		b.WriteString(actionSpecs[a].template)
		b.WriteString("\n")
	}
	b.WriteString("Must be valid JSON format.\nNo additional text or formatting allowed.")
	return b.String()
}

// Goal is the first user message of BuildMessages: the question, then the
// task's context, then where its data is mounted.
func Goal(task schemas.TaskView) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(task.Question))
	if c := strings.TrimSpace(task.Context); c != "" {
		b.WriteString("\n\nContext:\n")
		b.WriteString(c)
	}
	if len(task.Resources) > 0 {
		b.WriteString("\n\nThe data for this task is mounted read-only at:\n")
		for _, r := range task.Resources {
			fmt.Fprintf(&b, "- %s\n", DataPath(r))
		}
		b.WriteString("Read the data from there; do not modify it.")
	}
	return b.String()
}

// DataPath is where the sandbox mounts resource r (a path relative to the
// task data root).
func DataPath(r string) string {
	return path.Join(DataRoot, path.Clean("/"+r))
}

// ObservationMessage is the user message that follows an action: the
// observation text (res.Message, as upstream's env_message) and, only when
// showVerdict and check is set, the verifier's verdict. Upstream never shows
// the verdict. An empty observation reads "(no output)" because several
// servers reject empty messages.
func ObservationMessage(res schemas.ExecResult, check *schemas.Check, showVerdict bool) string {
	msg := res.Message
	if strings.TrimSpace(msg) == "" {
		msg = "(no output)"
	}
	if !showVerdict || check == nil {
		return msg
	}
	var v string
	if check.Accepted {
		v = "Verifier: the answer is correct."
	} else {
		v = "Verifier: the answer is not correct."
		if d := strings.TrimSpace(check.Verdict); d != "" {
			v = "Verifier: the answer is not correct (" + d + ")."
		}
	}
	return msg + "\n\n" + v
}

// ParseErrorMessage is the feedback for a reply that did not parse, in
// upstream's words: "Error: <parse error>. Please regenerate the
// action."
func ParseErrorMessage(err error) string {
	if err == nil {
		err = errors.New("unknown parse error")
	}
	return "Error: " + strings.TrimRight(err.Error(), ". ") + ". Please regenerate the action."
}

func number(n int) string {
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
	if n < len(words) {
		return words[n]
	}
	return fmt.Sprint(n)
}
