package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/medgym/medgym/schemas"
)

// Tool is one action as an OpenAI function tool, for tool-calling models
// (the environment server's "tools").
type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction is a tool's name, description and JSON Schema parameters.
type ToolFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

// Tools returns the actions a prompt for task advertises (Actions) as
// OpenAI tools, one per action, with the action's parameters: a tool call
// maps one-to-one onto the action of the same name (ToolCallReply).
func Tools(task schemas.TaskView, opt PromptOptions) []Tool {
	var out []Tool
	for _, name := range Actions(task, opt) {
		spec := actionSpecs[name]
		props := map[string]any{}
		for _, k := range paramKeys[name] {
			props[k] = map[string]any{"type": "string"}
		}
		if name == schemas.ActionAnswer {
			props["answer"] = map[string]any{"description": "the final answer: a string, number, boolean or list"}
		}
		out = append(out, Tool{Type: "function", Function: ToolFunction{
			Name:        name,
			Description: spec.purpose + " Parameters: " + spec.params + ".",
			Parameters: map[string]any{"type": "object", "properties": props,
				"required": append([]string(nil), paramKeys[name]...), "additionalProperties": false},
		}})
	}
	return out
}

// ToolCallReply re-serialises one tool call (name and JSON arguments) as
// the reply text the action parser reads: {"action": name, "params":
// arguments}. Parse then checks it like any reply, so a tool call and the
// same action written as text are one action.
func ToolCallReply(name string, arguments json.RawMessage) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", errors.New("tool call without a function name")
	}
	args := json.RawMessage(strings.TrimSpace(string(arguments)))
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil {
		return "", fmt.Errorf("tool call %s: arguments are not a JSON object: %w", name, err)
	}
	b, err := json.Marshal(struct {
		Action string                     `json:"action"`
		Params map[string]json.RawMessage `json:"params"`
	}{name, obj})
	if err != nil {
		return "", fmt.Errorf("tool call %s: %w", name, err)
	}
	return string(b), nil
}
