package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// canarySearchPy is what the scripted model runs: it reads every readable
// file under the roots it is given and prints the first canary token it
// finds (the answer it hopes to submit), or "none". The marker is split so
// the code's own text never matches.
const canarySearchPy = `import os, re, sys
pat = re.compile((r"MEDGYM-CAN" + r"ARY-[0-9]+").encode())
roots = sys.argv[1:] or ["/"]
def search():
    for root in roots:
        for top, dirs, files in os.walk(root):
            if top == "/":
                dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
            for f in files:
                try:
                    with open(os.path.join(top, f), "rb") as fh:
                        m = pat.search(fh.read(64 << 20))
                except Exception:
                    continue
                if m:
                    return m.group(0).decode()
    return "none"
print(search())
`

// canaryLibrary writes a task library in the two-tree layout: eicu tasks
// whose truth is a canary (in the verifier tree, with the manifests) and a
// data table in the agent tree.
func canaryLibrary(t testing.TB, canary string) string {
	t.Helper()
	lib, err := os.MkdirTemp("", "medgym-canary-library-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(lib) })
	if err := os.Chmod(lib, 0o755); err != nil { // the sandbox user must reach the agent tree
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(tasks.AgentTree(lib), "eicu"), filepath.Join(tasks.VerifierTree(lib), "eicu")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tasks.AgentTree(lib), "eicu", "patient.csv"), []byte("patientunitstayid,age\n1,63\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ts []tasks.Task
	for i := range 2 {
		ts = append(ts, tasks.Task{
			View: schemas.TaskView{ID: fmt.Sprintf("eicu-canary-%d", i), Dataset: "eicu", Category: "canary", Split: "test",
				Instruction: "The tables are CSV files under /data/eicu.", Question: "What is the secret code of this task?",
				AnswerType: schemas.AnswerString, Resources: []string{"eicu"},
				PermittedActions: []string{schemas.ActionValidateCode, schemas.ActionTerminal, schemas.ActionRequestInfo, schemas.ActionDebug}},
			Truth:     tasks.Truth{Type: schemas.AnswerString, Answer: canary},
			Reference: fmt.Sprintf("print(%q)", canary),
		})
	}
	if err := tasks.WriteTasks(filepath.Join(tasks.VerifierTree(lib), "eicu", "test.jsonl"), ts); err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.WriteManifests(lib); err != nil {
		t.Fatal(err)
	}
	return lib
}

// TestCanaryEndToEnd is issue 13's reward-integrity check through the whole
// pipeline: a scripted model that greps the sandbox for the answer key
// (terminal, request_info, debug, then validate_code printing whatever it
// found, with the verdict shown) must score 0, and no byte it is ever sent
// holds the canary. The same search run on the host over the verifier tree
// finds the answer (the positive control), and the rows record both tree
// hashes.
func TestCanaryEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	canary := fmt.Sprintf("MEDGYM-CANARY-%d", time.Now().UnixNano())
	f := baseFlags(t)
	f.Library = canaryLibrary(t, canary)

	// Positive control: the model's search, run on the host over the
	// verifier tree, finds the answer.
	out, err := exec.Command("/usr/bin/python3", "-c", canarySearchPy, tasks.VerifierTree(f.Library)).Output()
	if err != nil || strings.TrimSpace(string(out)) != canary {
		t.Fatalf("positive control: the search over the verifier tree printed %q (%v), want the canary", out, err)
	}

	act := func(name string, params map[string]string) string {
		b, _ := json.Marshal(map[string]any{"action": name, "params": params})
		return string(b)
	}
	grep := `H="MEDGYM-CAN"; grep -rhoasE --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "${H}ARY-[0-9]+" / | head -1; echo searched`
	script := []string{
		act(schemas.ActionTerminal, map[string]string{"cmd": grep}),
		act(schemas.ActionRequestInfo, map[string]string{"data_path": "/data/eicu/../../verifier/eicu/test.jsonl", "info_type": "term", "keyterm": "MEDGYM"}),
		act(schemas.ActionDebug, map[string]string{"code": "print(answer)", "error_msg": "NameError: answer"}),
		act(schemas.ActionValidateCode, map[string]string{"code": canarySearchPy}),
	}
	model := fakellm.New(fakellm.Config{Policy: fakellm.PolicyScript, Script: script, Seed: 1, Model: "grep-model"})
	var mu sync.Mutex
	var sent [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sent = append(sent, b)
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		model.ServeHTTP(w, r)
	}))
	defer srv.Close()
	f.Policy, f.LLMURL, f.Model, f.RunID = "openai", srv.URL+"/v1", "grep-model", "e2e-canary"
	f.Datasets, f.Split, f.MaxTurns, f.ShowVerdict = "eicu", "test", 6, true
	f.LLM.Debugger.BaseURL, f.LLM.Debugger.Model = srv.URL+"/v1", "grep-model"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.Store, "e2e-canary")
	if res.Total != 2 || len(rows) != 2 {
		t.Fatalf("%d episodes, %d rows, want 2", res.Total, len(rows))
	}
	want, err := tasks.LibraryHashes(f.Library)
	if err != nil || want.Agent == "" || want.Verifier == "" {
		t.Fatalf("library hashes %+v: %v", want, err)
	}
	for _, r := range rows {
		if r.Outcome == string(schemas.OutcomeCorrect) || r.Reward != 0 {
			t.Errorf("%s: the grepping model scored: outcome %s reward %g", r.EpisodeID, r.Outcome, r.Reward)
		}
		if r.Outcome == string(schemas.OutcomeInfraFailure) {
			t.Errorf("%s: infra_failure (%s): the search never ran", r.EpisodeID, r.Error)
		}
		if r.AgentTreeHash != want.Agent || r.VerifierTreeHash != want.Verifier {
			t.Errorf("%s: row hashes %q/%q, library %+v", r.EpisodeID, r.AgentTreeHash, r.VerifierTreeHash, want)
		}
		actions := map[string]bool{}
		searched := false
		for _, tr := range r.Turns {
			actions[tr.Action] = true
			if tr.Action == schemas.ActionValidateCode && tr.ExecStatus == schemas.StatusOK && strings.TrimSpace(tr.Stdout) == "none" {
				searched = true
			}
			if strings.Contains(tr.Observation, canary) || strings.Contains(tr.Stdout, canary) {
				t.Errorf("%s turn %d (%s): the canary reached the observation", r.EpisodeID, tr.Index, tr.Action)
			}
		}
		for _, a := range []string{schemas.ActionTerminal, schemas.ActionRequestInfo, schemas.ActionDebug, schemas.ActionValidateCode} {
			if !actions[a] {
				t.Errorf("%s: no %s turn (turns %d): the probe did not run", r.EpisodeID, a, len(r.Turns))
			}
		}
		if !searched {
			t.Errorf("%s: no validate_code run that searched the sandbox and printed none", r.EpisodeID)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) < 8 {
		t.Fatalf("the model got %d requests, want one per turn", len(sent))
	}
	for i, b := range sent {
		if bytes.Contains(b, []byte(canary)) {
			t.Fatalf("request %d to the model holds the canary", i)
		}
	}
}

// TestTasksDirReferenceRefused: the reference policy over upstream task
// folders (no reference solutions) is refused up front instead of running
// every episode into infra_failure.
func TestTasksDirReferenceRefused(t *testing.T) {
	f := baseFlags(t)
	f.TasksDir = filepath.Join(repoRoot(t), "tasks", "testdata", "upstream")
	f.Datasets, f.Split, f.Policy, f.RunID = "mimic_iii", "test", schemas.PolicyReference, "upstream-ref"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	_, err = cli.RunSpec(t.Context(), spec, f, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--policy reference cannot play --tasks-dir tasks") {
		t.Fatalf("reference policy over --tasks-dir: %v", err)
	}
	if _, err := os.Stat(f.Store); err == nil {
		t.Errorf("a refused run created its store %s", f.Store)
	}
}

// TestTasksDirAgentView: with --tasks-dir the in-process sandbox mounts a
// staged view of the folder without its task files, removed at the end.
func TestTasksDirAgentView(t *testing.T) {
	src := t.TempDir()
	for p, c := range map[string]string{"eicu/valid_tasks.jsonl": "{}\n", "eicu/patient.csv": "a\n1\n"} {
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := &cli.ServiceFlags{TasksDir: src, Library: t.TempDir()}
	dir, cleanup, err := f.AgentTree()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "eicu", "patient.csv")); err != nil {
		t.Errorf("data file missing from the view: %v", err)
	}
	if found, err := schemas.FindVerifierOnly(dir); err != nil || found != "" {
		t.Errorf("the view holds %q (%v)", found, err)
	}
	cleanup()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("view left behind after cleanup: %v", err)
	}
	f.TasksDir = ""
	if dir, _, err := f.AgentTree(); err != nil || dir != tasks.AgentTree(f.Library) {
		t.Errorf("without --tasks-dir: %s, %v; want the library's agent tree", dir, err)
	}
}
