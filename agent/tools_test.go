package agent

import (
	"encoding/json"
	"testing"

	"github.com/medgym/medgym/schemas"
)

// TestToolsMatchActions: one tool per advertised action, and a tool call of
// each parses to the action written as text.
func TestToolsMatchActions(t *testing.T) {
	task := mimicTask()
	opt := PromptOptions{AllowAnswer: true}
	tools := Tools(task, opt)
	acts := Actions(task, opt)
	if len(tools) != len(acts) {
		t.Fatalf("%d tools for %d actions", len(tools), len(acts))
	}
	args := map[string]string{
		schemas.ActionValidateCode: `{"code": "print(1)"}`,
		schemas.ActionTerminal:     `{"cmd": "ls /data"}`,
		schemas.ActionRequestInfo:  `{"data_path": "x.csv", "info_type": "column_names", "keyterm": ""}`,
		schemas.ActionDebug:        `{"code": "x", "error_msg": "y"}`,
		schemas.ActionAnswer:       `{"answer": 42}`,
	}
	for i, tool := range tools {
		if tool.Function.Name != acts[i] || tool.Type != "function" {
			t.Fatalf("tool %d is %+v, want action %s", i, tool, acts[i])
		}
		reply, err := ToolCallReply(tool.Function.Name, json.RawMessage(args[acts[i]]))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(reply)
		if err != nil {
			t.Fatalf("tool call %s: %v", acts[i], err)
		}
		want, err := Parse(`{"action": "` + acts[i] + `", "params": ` + args[acts[i]] + `}`)
		if err != nil || got.Name != want.Name || string(got.Params) != string(want.Params) {
			t.Fatalf("tool call %s parsed as %+v, the text as %+v (%v)", acts[i], got, want, err)
		}
	}
	if _, err := ToolCallReply("validate_code", json.RawMessage(`[1]`)); err == nil {
		t.Fatal("arguments that are not an object were accepted")
	}
	if _, err := ToolCallReply(" ", nil); err == nil {
		t.Fatal("a tool call without a name was accepted")
	}
}
