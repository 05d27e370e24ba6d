package systemtest

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// dataRoot is the shared data (tasks.DataRoot).
func dataRoot(t testing.TB) string {
	t.Helper()
	return tasks.DataRoot()
}

func newTestFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// baseFlags are the flags of the pipeline tests: medgym run's defaults
// but end_on both. Those tests were written for episodes that end on the
// first accepted code run (one turn for a reference solution); the default
// rule, end_on answer, has its own tests (oracle_test.go), which start from
// defaultFlags.
func baseFlags(t *testing.T) *cli.RunFlags {
	t.Helper()
	f := defaultFlags(t)
	f.EndOn = schemas.EndOnBoth
	return f
}

// defaultFlags are medgym run's default flags, with the test's data, store
// and state.
func defaultFlags(t *testing.T) *cli.RunFlags {
	t.Helper()
	var f cli.RunFlags
	fs := newTestFlagSet()
	f.Register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	f.Data = dataRoot(t)
	f.Store = filepath.Join(t.TempDir(), "store")
	f.State = filepath.Join(t.TempDir(), "state")
	f.Quiet = true
	f.LogLevel = "error"
	return &f
}

func readRun(t *testing.T, ctx context.Context, storeURL, runID string) []parquet.Row {
	t.Helper()
	st, err := store.Open(ctx, storeURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.ReadRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestRunReferenceMedCalc runs the whole pipeline over an embedded JetStream
// server with the reference policy on real MedCalc-Bench tasks and checks
// the Parquet rows field by field.
func TestRunReferenceMedCalc(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.Limit, f.Seed, f.RunID = 12, 42, "e2e-ref"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 12 || res.Outcomes[schemas.OutcomeCorrect] != 12 {
		t.Fatalf("outcomes %v of %d episodes, want 12 correct", res.Outcomes, res.Total)
	}
	lib := tasks.NewCache(f.Data, "", f.Library)
	rows := readRun(t, ctx, f.Store, "e2e-ref")
	if len(rows) != 12 {
		t.Fatalf("store holds %d rows, want 12", len(rows))
	}
	ids := map[string]bool{}
	for _, r := range rows {
		if ids[r.EpisodeID] {
			t.Fatalf("episode %s stored twice", r.EpisodeID)
		}
		ids[r.EpisodeID] = true
		task, err := lib.Task(ctx, "medcalcbench", "test", r.TaskID)
		if err != nil {
			t.Fatalf("row task %s: %v", r.TaskID, err)
		}
		switch {
		case r.RunID != "e2e-ref", r.Dataset != "medcalcbench", r.Split != "test", r.SampleIndex != 0:
			t.Fatalf("identity fields wrong: %+v", r)
		case r.Policy != "reference" || r.Model != "reference-solution":
			t.Fatalf("policy/model = %q/%q, want reference/reference-solution", r.Policy, r.Model)
		case r.Reward != 1 || r.Outcome != "correct" || r.Termination != string(schemas.EndAccepted):
			t.Fatalf("episode %s: reward %v outcome %s termination %s (error %q)", r.EpisodeID, r.Reward, r.Outcome, r.Termination, r.Error)
		case r.NumTurns != 1 || len(r.Turns) != 1:
			t.Fatalf("episode %s: %d turns, want 1", r.EpisodeID, r.NumTurns)
		case r.VerifierVersion != verify.VersionFor(verify.Strict):
			t.Fatalf("verifier version %q", r.VerifierVersion)
		case r.StartedAt.IsZero() || r.FinishedAt.Before(r.StartedAt):
			t.Fatalf("times %v .. %v", r.StartedAt, r.FinishedAt)
		case r.Category != task.View.Category:
			t.Fatalf("category %q, want %q", r.Category, task.View.Category)
		}
		turn := r.Turns[0]
		var p struct{ Code string }
		if err := json.Unmarshal([]byte(turn.ParamsJSON), &p); err != nil || p.Code != task.Reference {
			t.Fatalf("turn params do not hold the reference solution: %v", err)
		}
		if turn.Action != "validate_code" || turn.ExecStatus != "ok" || turn.ExitCode != 0 || !turn.Accepted {
			t.Fatalf("turn: action %s status %s exit %d accepted %v", turn.Action, turn.ExecStatus, turn.ExitCode, turn.Accepted)
		}
		if strings.TrimSpace(turn.Stdout) == "" || r.FinalAnswer != strings.TrimSpace(turn.Stdout) {
			t.Fatalf("final answer %q vs stdout %q", r.FinalAnswer, turn.Stdout)
		}
		// The prompt carries the patient note (upstream forgot it) and never the truth.
		if len(r.Messages) < 3 || !strings.Contains(r.Messages[1].Content, firstWords(task.View.Context)) {
			t.Fatalf("the first user message lacks the patient note")
		}
		for _, m := range r.Messages {
			if m.Role != "assistant" && strings.Contains(m.Content, task.Truth.Answer) && len(task.Truth.Answer) > 4 && m.Role == "system" {
				t.Fatalf("ground truth %q leaked into the %s prompt", task.Truth.Answer, m.Role)
			}
		}
	}
}

func firstWords(s string) string {
	w := strings.Fields(s)
	return strings.Join(w[:min(8, len(w))], " ")
}

// TestRunFakeOpenAIMultiTurn drives one episode through the openai policy
// against a fake OpenAI-compatible server speaking the real wire format:
// a malformed action, a program that crashes, then the right program.
func TestRunFakeOpenAIMultiTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: f.Data})
	if err != nil {
		t.Fatal(err)
	}
	task := ts[3]
	good, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": task.Reference}})
	script := []string{
		"I will compute it now: {\"action\": \"validate_code\", \"params\": {\"code\": ", // malformed
		"```json\n{\"action\": \"validate_code\", \"params\": {\"code\": \"x = 1/0\\nprint(x)\"}}\n```",
		string(good),
	}
	srv := httptest.NewServer(fakellm.New(fakellm.Config{Policy: "script", Script: script, Seed: 1, Model: "fake-model"}))
	defer srv.Close()
	f.Policy, f.LLMURL, f.Model, f.RunID = "openai", srv.URL+"/v1", "fake-model", "e2e-fake"
	f.TaskIDs = task.View.ID
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcomes[schemas.OutcomeCorrect] != 1 {
		rows := readRun(t, ctx, f.Store, "e2e-fake")
		for _, r := range rows {
			t.Logf("error: %s turns %d", r.Error, len(r.Turns))
		}
		t.Fatalf("outcomes %v, want 1 correct", res.Outcomes)
	}
	rows := readRun(t, ctx, f.Store, "e2e-fake")
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	if r.Policy != "openai" || r.Model != "fake-model" || r.NumTurns != 3 {
		t.Fatalf("policy %s model %s turns %d", r.Policy, r.Model, r.NumTurns)
	}
	t0, t1, t2 := r.Turns[0], r.Turns[1], r.Turns[2]
	if t0.RawText != script[0] || t0.ParseError == "" || t0.Action != "" {
		t.Fatalf("turn 0 should keep the raw malformed text and a parse error: %+v", t0)
	}
	if t1.Action != "validate_code" || t1.ExecStatus != "error" || t1.ExitCode == 0 || !strings.Contains(t1.Stderr, "ZeroDivisionError") || t1.Accepted {
		t.Fatalf("turn 1 should be a crashed run: %+v", t1)
	}
	if t2.RawText != script[2] || t2.ExecStatus != "ok" || !t2.Accepted {
		t.Fatalf("turn 2 should be the accepted run: %+v", t2)
	}
	for i, tr := range r.Turns {
		if tr.PromptTokens == 0 || tr.CompletionTokens == 0 {
			t.Fatalf("turn %d lacks token counts from the usage block: %d/%d", i, tr.PromptTokens, tr.CompletionTokens)
		}
	}
	// Conversation: system, user goal, then assistant/user pairs per turn.
	if len(r.Messages) != 2+2*3 {
		t.Fatalf("%d messages, want 8", len(r.Messages))
	}
}
