package replay

import (
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
)

// TestExecuted follows the llm-worker's rules for which turns reached the
// sandbox.
func TestExecuted(t *testing.T) {
	view := schemas.TaskView{PermittedActions: []string{"validate_code", "request_info", "answer"}}
	code := `{"code":"print(1)"}`
	turns := []parquet.Turn{
		{ParseError: "no JSON"}, // 0: did not parse
		{Action: "terminal", ParamsJSON: `{"cmd":"ls"}`, ExecStatus: "error"},          // 1: not permitted
		{Action: "validate_code", ParamsJSON: code, ExecStatus: "ok"},                  // 2: ran
		{Action: "validate_code", ParamsJSON: code, ExecStatus: "info"},                // 3: repeat, warned
		{Action: "request_info", ParamsJSON: `{"type":"columns"}`, ExecStatus: "info"}, // 4: ran
		{Action: "validate_code", ParamsJSON: code},                                    // 5: no observation
		{Action: "answer", ParamsJSON: `{"answer":"1"}`},                               // 6: not a sandbox action
	}
	want := map[int]bool{2: true, 4: true}
	for i := range turns {
		if got := executed(view, turns, i, schemas.EpisodeOptions{LoopGuard: "warn"}); got != want[i] {
			t.Errorf("turn %d: executed %v, want %v", i, got, want[i])
		}
	}
	// With the loop guard off, a repeat runs again.
	if !executed(view, turns, 3, schemas.EpisodeOptions{LoopGuard: "off"}) {
		t.Error("turn 3 with loop guard off: want executed")
	}
	// Under upstream's episode rules an unadvertised upstream action ran.
	if !executed(view, turns, 1, schemas.UpstreamOptions()) {
		t.Error("turn 1 under compat upstream: want executed")
	}
}

func TestRunID(t *testing.T) {
	for v, want := range map[string]string{
		"1.0.0+strict.3f2a9c1d": "r1-replay-3f2a9c1d",
		"1.0.0+invalid":         "r1-replay-0_invalid",
	} {
		got := RunID("r1", v)
		if got != want || !schemas.ValidToken(got) {
			t.Errorf("RunID(r1, %q) = %q, want %q (a valid token)", v, got, want)
		}
	}
}
