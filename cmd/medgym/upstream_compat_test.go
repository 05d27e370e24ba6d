package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// TestUpstreamCompatFlagsAndSpec: --upstream-compat sets upstream's
// options, refuses a flag that contradicts them, and a spec file's
// options.compat fills in the options it leaves out.
func TestUpstreamCompatFlagsAndSpec(t *testing.T) {
	var f runFlags
	fs := newTestFlagSet()
	f.register(fs)
	if err := fs.Parse([]string{"--upstream-compat"}); err != nil {
		t.Fatal(err)
	}
	spec, err := f.spec()
	if err != nil || spec.Options != schemas.UpstreamOptions() {
		t.Fatalf("--upstream-compat: %+v, %v", spec.Options, err)
	}
	for _, extra := range [][]string{{"--end-on", "both"}, {"--max-turns", "30"}, {"--verifier-mode", "strict"}, {"--show-verdict"}} {
		_, _, err := runCLI(t, append([]string{"run", "--upstream-compat"}, extra...)...)
		if err == nil || !strings.Contains(err.Error(), extra[0]) || !strings.Contains(err.Error(), "--upstream-compat") {
			t.Errorf("%v: %v", extra, err)
		}
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "up.yaml")
	if err := os.WriteFile(good, []byte("datasets: [medcalcbench]\noptions:\n  compat: upstream\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := loadSpecFile(good); err != nil || s.Options != schemas.UpstreamOptions() || s.Options.Validate() != nil {
		t.Fatalf("compat spec: %+v, %v", s.Options, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("run_id: x\ndatasets: [medcalcbench]\npolicy: {name: reference}\noptions:\n  compat: upstream\n  end_on: both\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := loadSpecFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "compat upstream requires end_on accepted") {
		t.Errorf("contradicting spec: %v", err)
	}
	// A spec written before the field keeps medgym's rules.
	old := filepath.Join(dir, "old.yaml")
	if err := os.WriteFile(old, []byte("datasets: [medcalcbench]\noptions:\n  end_on: both\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := loadSpecFile(old); err != nil || s.Options.Upstream() || s.Options != schemas.DefaultOptions() {
		t.Errorf("old spec: %+v, %v", s.Options, err)
	}
}

// TestRunUpstreamCompat plays two MedCalc-Bench episodes through the whole
// pipeline under --upstream-compat with a scripted model: one solves the
// task at its first code run (accepted, correct), the other prints no
// number for all 15 steps (turn limit, a failure with no final answer). The
// prompt has upstream's header and no answer action.
func TestRunUpstreamCompat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: f.data})
	if err != nil {
		t.Fatal(err)
	}
	f.upstreamCompat = true
	f.policy, f.model = "openai", "fake-model"
	for _, c := range []struct {
		name    string
		script  []string
		outcome schemas.Outcome
		turns   int
	}{
		{"solved", []string{codeAction(ts[3].Reference)}, schemas.OutcomeCorrect, 1},
		{"never a number", []string{codeAction("print('still thinking')")}, schemas.OutcomeTurnLimit, 15},
	} {
		f.runID, f.taskIDs = "up-"+strings.ReplaceAll(c.name, " ", "-"), ts[3].View.ID
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
func playScripted(t *testing.T, ctx context.Context, f *runFlags, script []string, want schemas.Outcome) parquet.Row {
	t.Helper()
	srv := httptest.NewServer(fakellm.New(fakellm.Config{Policy: "script", Script: script, Seed: 1, Model: "fake-model"}))
	defer srv.Close()
	f.llmURL = srv.URL + "/v1"
	spec, err := f.spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := runSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.store, f.runID)
	if res.Outcomes[want] != 1 || len(rows) != 1 {
		t.Fatalf("run %s: outcomes %v, %d rows, want one %s", f.runID, res.Outcomes, len(rows), want)
	}
	return rows[0]
}

func codeAction(src string) string {
	b, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": src}})
	return string(b)
}
