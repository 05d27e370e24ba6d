package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
)

func mimicTask() schemas.TaskView {
	return schemas.TaskView{
		ID: "mimic_iii-1", Dataset: "mimic_iii", Instruction: "You are a biomedical expert in handling EHR data.",
		Question:         "How many patients were admitted in 2105?",
		Context:          "Patient note: 64 y/o male {stable}.",
		Resources:        []string{"mimic_iii", "../etc/passwd"},
		PermittedActions: []string{"validate_code", "debug", "request_info"},
	}
}

func TestBuildMessagesStructure(t *testing.T) {
	t.Parallel()
	msgs := BuildMessages(mimicTask(), PromptOptions{})
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
		t.Fatalf("roles = %+v, want system, user", msgs)
	}
	sys := msgs[0].Content
	for _, want := range []string{
		"You are a biomedical expert in handling EHR data.\n\n",
		"You are allowed to take the following three actions:\n1. request_info:",
		"\n2. validate_code:", "\n3. debug:",
		"Code requirements:\n- Request all the information",
		"variable named `answer`", "self-contained", "print(answer)",
		"Response format requirements, strictly one of the following:\n{\"action\": \"request_info\"",
		"}}\nor\n{\"action\": \"validate_code\"",
		"Must be valid JSON format.\nNo additional text or formatting allowed.",
	} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, sys)
		}
	}
	for _, absent := range []string{"terminal", `"answer"`} {
		if strings.Contains(sys, absent) {
			t.Errorf("system prompt mentions non-permitted %q", absent)
		}
	}
	if got := strings.Count(sys, "\nor\n"); got != 2 {
		t.Errorf("templates joined by %d \"or\", want 2", got)
	}
	goal := msgs[1].Content
	wantGoal := "How many patients were admitted in 2105?\n\nContext:\nPatient note: 64 y/o male {stable}.\n\n" +
		"The data for this task is mounted read-only at:\n- /data/mimic_iii\n- /data/etc/passwd\nRead the data from there; do not modify it."
	if goal != wantGoal {
		t.Errorf("goal =\n%q\nwant\n%q", goal, wantGoal)
	}
}

func TestBuildMessagesSystemAsUser(t *testing.T) {
	t.Parallel()
	task := mimicTask()
	msgs := BuildMessages(task, PromptOptions{SystemAsUser: true})
	if len(msgs) != 1 || msgs[0].Role != "user" {
		t.Fatalf("messages = %+v, want one user message", msgs)
	}
	want := SystemPrompt(task, PromptOptions{}) + "\n\n" + Goal(task)
	if msgs[0].Content != want {
		t.Fatalf("content = %q, want system text then goal", msgs[0].Content)
	}
}

func TestActions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		permitted []string
		allow     bool
		want      string
		header    string
	}{
		{nil, false, "validate_code", "the following action:"},
		{[]string{"terminal", "validate_code", "debug", "bogus", "debug"}, false, "validate_code debug terminal", "the following three actions:"},
		{[]string{"request_info", "validate_code", "debug", "terminal"}, true, "request_info validate_code debug terminal answer", "the following five actions:"},
		{[]string{"validate_code", "answer"}, false, "validate_code", "the following action:"},
		{[]string{"validate_code"}, true, "validate_code answer", "the following two actions:"},
	}
	for _, tt := range tests {
		task := schemas.TaskView{Question: "q", PermittedActions: tt.permitted}
		opt := PromptOptions{AllowAnswer: tt.allow}
		got := strings.Join(Actions(task, opt), " ")
		if got != tt.want {
			t.Errorf("Actions(%v, %v) = %q, want %q", tt.permitted, tt.allow, got, tt.want)
		}
		if sys := SystemPrompt(task, opt); !strings.Contains(sys, tt.header) {
			t.Errorf("prompt for %v lacks %q", tt.permitted, tt.header)
		}
	}
}

// TestTemplatesParse keeps the prompt and the parser in agreement: every
// response template, with its placeholders filled, parses as its action.
func TestTemplatesParse(t *testing.T) {
	t.Parallel()
	for name, s := range actionSpecs {
		filled := strings.ReplaceAll(s.template, "<answer>", "42")
		for _, p := range []string{"code", "cmd", "data_path", "info_type", "keyterm", "error_msg"} {
			filled = strings.ReplaceAll(filled, "<"+p+">", "x")
		}
		act, err := Parse(filled)
		if err != nil || act.Name != name {
			t.Errorf("template %s parses to %q, %v", name, act.Name, err)
		}
	}
}

func TestObservationMessage(t *testing.T) {
	t.Parallel()
	res := schemas.ExecResult{Status: schemas.StatusOK, Message: "42\n"}
	wrong := &schemas.Check{Accepted: false, Answer: "42", Verdict: "expected 43"}
	right := &schemas.Check{Accepted: true, Answer: "43"}
	tests := []struct {
		name  string
		res   schemas.ExecResult
		check *schemas.Check
		show  bool
		want  string
	}{
		{"verbatim like upstream", res, wrong, false, "42\n"},
		{"no check", res, nil, true, "42\n"},
		{"wrong shown", res, wrong, true, "42\n\n\nVerifier: the answer is not correct (expected 43)."},
		{"right shown", res, right, true, "42\n\n\nVerifier: the answer is correct."},
		{"empty output", schemas.ExecResult{}, nil, false, "(no output)"},
	}
	for _, tt := range tests {
		if got := ObservationMessage(tt.res, tt.check, tt.show); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestParseErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := Parse("no json here")
	got := ParseErrorMessage(err)
	want := "Error: " + ErrNoJSON.Error() + ". Please regenerate the action."
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("%w: unexpected '}'.", ErrBadJSON)
	if got := ParseErrorMessage(wrapped); strings.Contains(got, "..") || !strings.HasSuffix(got, "'}'. Please regenerate the action.") {
		t.Fatalf("got %q", got)
	}
	if got := ParseErrorMessage(nil); !strings.HasPrefix(got, "Error: ") {
		t.Fatalf("nil error: %q", got)
	}
}

// TestToolCallsPrompt: in tools mode the system prompt describes the
// offered tools (the task's permitted actions, those of Tools) and asks for
// one call per reply, with no JSON reply format; the rest is the JSON
// mode's, which is unchanged, and upstream's layout ignores the mode.
func TestToolCallsPrompt(t *testing.T) {
	t.Parallel()
	task := mimicTask() // no terminal: the task does not permit it
	for _, answer := range []bool{false, true} {
		opt := PromptOptions{ToolCalls: true, AllowAnswer: answer}
		sys := SystemPrompt(task, opt)
		var names []string
		for _, tool := range Tools(task, opt) {
			names = append(names, tool.Function.Name)
		}
		if !slices.Equal(names, Actions(task, opt)) || slices.Contains(names, schemas.ActionTerminal) {
			t.Fatalf("tools %v, actions %v", names, Actions(task, opt))
		}
		for _, want := range []string{
			fmt.Sprintf("You are allowed to take the following %s actions, each a tool you call:\n1. request_info:", number(len(names))),
			"Code requirements:\n", "print(answer)",
			"Each reply calls exactly one of the tools " + strings.Join(names, ", ") + ", with the parameters listed above.",
			"a call of any other is refused",
		} {
			if !strings.Contains(sys, want) {
				t.Errorf("answer %v: tools prompt lacks %q:\n%s", answer, want, sys)
			}
		}
		for _, not := range []string{`{"action"`, "JSON", "terminal"} {
			if strings.Contains(sys, not) {
				t.Errorf("answer %v: tools prompt has %q:\n%s", answer, not, sys)
			}
		}
		json := SystemPrompt(task, PromptOptions{AllowAnswer: answer})
		if !strings.HasPrefix(json, sys[:strings.Index(sys, "You are allowed")]) || !strings.Contains(json, "Must be valid JSON format.") {
			t.Errorf("answer %v: JSON mode changed:\n%s", answer, json)
		}
	}
	if up := SystemPrompt(task, PromptOptions{ToolCalls: true, Upstream: true}); up != SystemPrompt(task, PromptOptions{Upstream: true}) {
		t.Errorf("upstream layout changed by tools mode:\n%s", up)
	}
	opts := schemas.DefaultOptions()
	opts.PromptMode = schemas.PromptModeTools
	if !EpisodePromptOptions(opts, false).ToolCalls || EpisodePromptOptions(schemas.DefaultOptions(), false).ToolCalls {
		t.Error("EpisodePromptOptions does not follow prompt_mode")
	}
}
