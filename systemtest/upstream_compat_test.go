package systemtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// TestRunUpstreamCompat plays two MedCalc-Bench episodes through the whole
// pipeline under --upstream-compat with a scripted model: one solves the
// task at its first code run (accepted, correct), the other prints no
// number for all 15 steps (turn limit, a failure with no final answer). The
// prompt has upstream's header and no answer action.
func TestRunUpstreamCompat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: f.Data})
	if err != nil {
		t.Fatal(err)
	}
	f.UpstreamCompat = true
	f.Policy, f.Model = "openai", "fake-model"
	for _, c := range []struct {
		name    string
		script  []string
		outcome schemas.Outcome
		turns   int
	}{
		{"solved", []string{codeAction(ts[3].Reference)}, schemas.OutcomeCorrect, 1},
		{"never a number", []string{codeAction("print('still thinking')")}, schemas.OutcomeTurnLimit, 15},
	} {
		f.RunID, f.TaskIDs = "up-"+strings.ReplaceAll(c.name, " ", "-"), ts[3].View.ID
		r := playScripted(t, ctx, f, c.script, c.outcome)
		if int(r.NumTurns) != c.turns || r.VerifierMode != "upstream" || !strings.Contains(r.VerifierVersion, "upstream") {
			t.Fatalf("%s: %d turns, verifier %s/%s", c.name, r.NumTurns, r.VerifierMode, r.VerifierVersion)
		}
		if c.outcome == schemas.OutcomeTurnLimit && (r.FinalAnswer != "" || r.Termination != string(schemas.EndTurnLimit)) {
			t.Fatalf("%s: final answer %q termination %s", c.name, r.FinalAnswer, r.Termination)
		}
		sys := r.Messages[0].Content
		if !strings.Contains(sys, "exactly three different actions") || strings.Contains(sys, `"answer"`) ||
			!strings.Contains(r.Messages[1].Content, ts[3].View.Context[:40]) {
			t.Fatalf("%s: prompt\n%s\n---\n%s", c.name, sys, r.Messages[1].Content)
		}
	}
}

// playScripted runs f's spec (one task) against a fake model that replies
// with script, and returns its one stored row, whose outcome must be want.
func playScripted(t *testing.T, ctx context.Context, f *cli.RunFlags, script []string, want schemas.Outcome) parquet.Row {
	t.Helper()
	srv := httptest.NewServer(fakellm.New(fakellm.Config{Policy: "script", Script: script, Seed: 1, Model: "fake-model"}))
	defer srv.Close()
	f.LLMURL = srv.URL + "/v1"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.Store, f.RunID)
	if res.Outcomes[want] != 1 || len(rows) != 1 {
		t.Fatalf("run %s: outcomes %v, %d rows, want one %s", f.RunID, res.Outcomes, len(rows), want)
	}
	return rows[0]
}

func codeAction(src string) string {
	b, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": src}})
	return string(b)
}
