package systemtest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/apitest"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
)

// guesses are a guessing agent's replies: it prints candidate answers,
// the truth among them but not last, and never learns which was right.
func guesses(truth string) []string {
	var out []string
	for _, g := range []string{"guess-a", truth, "guess-b", "guess-c"} {
		out = append(out, act("validate_code", map[string]any{"code": fmt.Sprintf("print(%q)", g)}))
	}
	return out
}

// TestDefaultRuleGuessingScoresZero: under the default episode rule
// (end_on answer) a guessing agent that prints candidates through
// validate_code, the truth among them, and then answers wrong or runs out
// of turns scores 0 through the environment API (a real `medgym env
// serve`: sandbox, verifier, store), and no observation or step info tells
// it which candidate was right. The positive control: the same prints under
// end_on both end the episode on the truth with reward 1, the oracle the
// default removes.
func TestDefaultRuleGuessingScoresZero(t *testing.T) {
	needSandbox(t)
	canary := fmt.Sprintf("MEDGYM-CANARY-%d", time.Now().UnixNano())
	lib := canaryLibrary(t, canary)
	dir := t.TempDir()
	p := startEnv(t, lib, dir)
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, chk, p.url)
	play := func(opts map[string]any, replies []string) (steps []map[string]any) {
		t.Helper()
		sess := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": opts})
		for i, r := range replies {
			out := c.must(200, "POST", "/v1/sessions/"+sess["session_id"].(string)+"/step", map[string]any{"turn": i, "content": r})
			steps = append(steps, out)
			if out["done"] == true {
				break
			}
		}
		return steps
	}
	noVerdict := func(name string, steps []map[string]any) {
		t.Helper()
		for i, s := range steps[:len(steps)-1] {
			info := s["info"].(map[string]any)
			if s["done"] != false || s["reward"] != 0.0 || info["accepted"] != nil || info["verdict"] != nil || strings.Contains(s["observation"].(string), "erifier") {
				t.Fatalf("%s: step %d tells the agent something about its value: %v", name, i, s)
			}
		}
	}

	answered := play(map[string]any{"run_id": "guess"}, append(guesses(canary), act("answer", map[string]any{"answer": "guess-d"})))
	noVerdict("answered", answered)
	if last := answered[len(answered)-1]; len(answered) != 5 || last["done"] != true || last["reward"] != 0.0 || last["info"].(map[string]any)["outcome"] != "incorrect" {
		t.Fatalf("guesses then a wrong answer: %d steps, last %v", len(answered), last)
	}
	limit := play(map[string]any{"run_id": "guess", "max_turns": 4}, guesses(canary))
	noVerdict("turn limit", limit)
	if last := limit[len(limit)-1]; len(limit) != 4 || last["done"] != true || last["truncated"] != true || last["reward"] != 0.0 ||
		last["info"].(map[string]any)["outcome"] != "turn_limit" {
		t.Fatalf("guesses up to the turn limit: %d steps, last %v", len(limit), last)
	}
	control := play(map[string]any{"run_id": "guess-control", "end_on": schemas.EndOnBoth}, guesses(canary))
	if last := control[len(control)-1]; len(control) != 2 || last["done"] != true || last["reward"] != 1.0 {
		t.Fatalf("positive control (end_on both): %d steps, last %v; want the print of the truth to end the episode with reward 1", len(control), last)
	}
	p.stop(t)
	rows := readRun(t, context.Background(), filepath.Join(dir, "store"), "guess")
	if len(rows) != 2 || rows[0].Reward != 0 || rows[1].Reward != 0 {
		t.Fatalf("stored guessing episodes: %+v", rows)
	}
	checkContract(t, chk, "")
}

// TestDefaultRuleGuessingScoresZeroRun: the same guessing agent as a
// scripted model behind `medgym run` with its default flags (the pipeline
// the online trainer samples through) runs out of turns with reward 0;
// under the old default (end_on both) its second print, the truth, ended
// the episode with reward 1.
func TestDefaultRuleGuessingScoresZeroRun(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	canary := fmt.Sprintf("MEDGYM-CANARY-%d", time.Now().UnixNano())
	model := fakellm.New(fakellm.Config{Policy: fakellm.PolicyScript, Script: guesses(canary), Model: "guesser"})
	srv := httptest.NewServer(model)
	defer srv.Close()
	f := defaultFlags(t)
	f.Library = canaryLibrary(t, canary)
	f.Policy, f.LLMURL, f.Model, f.RunID = "openai", srv.URL+"/v1", "guesser", "guess-run"
	f.Datasets, f.Split, f.TaskIDs, f.MaxTurns = "eicu", "test", "eicu-canary-0", 4
	_, rows := runToEnd(t, ctx, f)
	if len(rows) != 1 || rows[0].Reward != 0 || rows[0].Outcome != string(schemas.OutcomeTurnLimit) || len(rows[0].Turns) != 4 {
		t.Fatalf("guessing run: %+v", rows)
	}
	for _, tr := range rows[0].Turns {
		if tr.Accepted || strings.Contains(tr.Observation, "erifier") {
			t.Fatalf("turn %d was checked or shown a verdict: %+v", tr.Index, tr)
		}
	}
	if spec, err := f.Spec(); err != nil || spec.Options.EndOn != schemas.EndOnAnswer || spec.Options.ShowVerdict {
		t.Fatalf("medgym run's default options %+v (%v)", spec.Options, err)
	}
}
