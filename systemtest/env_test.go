package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/env/apitest"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// envProc is a `medgym env serve` running in this process.
type envProc struct {
	url    string
	cancel context.CancelFunc
	done   chan error
}

// lineWriter passes stderr on and reports the server's address.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if i := strings.Index(w.buf.String(), "serving http://"); i >= 0 {
		rest := w.buf.String()[i+len("serving http://"):]
		if j := strings.IndexByte(rest, ' '); j > 0 {
			select {
			case w.addr <- rest[:j]:
			default:
			}
		}
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startEnv runs `medgym env serve` on an embedded server over lib with
// state and store under dir, plus args.
func startEnv(t testing.TB, lib, dir string, args ...string) *envProc {
	t.Helper()
	return startEnvArgs(t, envServeArgs(t, lib, dir, args...))
}

// startEnvArgs runs medgym with all (`env serve ...`) until the test ends.
func startEnvArgs(t testing.TB, all []string) *envProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &lineWriter{addr: make(chan string, 1)}
	p := &envProc{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- cli.Run(ctx, all, io.Discard, w) }()
	select {
	case addr := <-w.addr:
		p.url = "http://" + addr
	case err := <-p.done:
		cancel()
		t.Fatalf("env serve stopped: %v\n%s", err, w)
	case <-time.After(3 * time.Minute):
		cancel()
		t.Fatalf("env serve did not start:\n%s", w)
	}
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *envProc) stop(t testing.TB) {
	t.Helper()
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("env serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("env serve did not stop")
	}
}

// apiClient talks to the server through the OpenAPI checker.
type apiClient struct {
	t     *testing.T
	base  string
	token string
	http  *http.Client
}

func newAPIClient(t *testing.T, chk *apitest.Checker, base string) *apiClient {
	return &apiClient{t: t, base: base, http: &http.Client{Transport: chk, Timeout: 5 * time.Minute}}
}

func (c *apiClient) do(method, path string, body any) (int, http.Header, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, resp.Header, out
}

// must is do that requires the status.
func (c *apiClient) must(want int, method, path string, body any) map[string]any {
	c.t.Helper()
	code, _, out := c.do(method, path, body)
	if code != want {
		c.t.Fatalf("%s %s: %d %v, want %d", method, path, code, out, want)
	}
	return out
}

func errCode(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func act(name string, params map[string]any) string {
	b, _ := json.Marshal(map[string]any{"action": name, "params": params})
	return string(b)
}

func needSandbox(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap not installed")
	}
}

func checkContract(t *testing.T, chk *apitest.Checker, canary string) {
	t.Helper()
	for _, f := range chk.Failures() {
		t.Error(f)
	}
	ex := chk.Exchanges()
	for _, e := range ex {
		if canary != "" && bytes.Contains(e.Body, []byte(canary)) {
			t.Errorf("%s %s (%d) holds the canary: %.300s", e.Method, e.Path, e.Status, e.Body)
		}
	}
	if len(ex) == 0 {
		t.Fatal("no response was checked")
	}
}

// TestEnvAPIEndToEnd plays an episode through `medgym env serve` (embedded
// JetStream, the bubblewrap sandbox, the verifier, the store) over a
// library whose truth is a canary: a model that searches for the answer
// key, a retried step, bad input of every kind, and the stored row. Every
// response is validated against openapi.json and searched for the canary,
// which the same search finds on the host (positive control).
func TestEnvAPIEndToEnd(t *testing.T) {
	needSandbox(t)
	canary := fmt.Sprintf("MEDGYM-CANARY-%d", time.Now().UnixNano())
	lib := canaryLibrary(t, canary)
	if out, err := exec.Command("/usr/bin/python3", "-c", canarySearchPy, tasks.VerifierTree(lib)).Output(); err != nil || strings.TrimSpace(string(out)) != canary {
		t.Fatalf("positive control: the search over the verifier tree printed %q (%v), want the canary", out, err)
	}
	dir := t.TempDir()
	p := startEnv(t, lib, dir)
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, chk, p.url)

	list := c.must(200, "GET", "/v1/tasks", nil)
	ts, _ := list["tasks"].([]any)
	if len(ts) != 2 || ts[0].(map[string]any)["id"] != "eicu-canary-0" {
		t.Fatalf("tasks: %v", list)
	}
	c.must(200, "GET", "/v1/tasks?dataset=eicu&split=test&limit=1&offset=1", nil)
	if out := c.must(404, "GET", "/v1/tasks?dataset=nope", nil); errCode(out) != "unknown_dataset" {
		t.Fatalf("unknown dataset: %v", out)
	}
	if out := c.must(404, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-nope"}); errCode(out) != "unknown_task" {
		t.Fatalf("unknown task: %v", out)
	}
	if out := c.must(400, "POST", "/v1/sessions", `{"task_id": "eicu-canary-0", `); errCode(out) != "malformed_body" {
		t.Fatalf("malformed body: %v", out)
	}
	sess := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0",
		"options": map[string]any{"max_turns": 5, "show_verdict": true, "model": "m", "run_id": "env-e2e", "tags": map[string]string{"k": "v"}}})
	id := sess["session_id"].(string)
	msgs := sess["messages"].([]any)
	tools := sess["tools"].([]any)
	if len(msgs) != 2 || len(tools) != 5 || sess["episode_id"] != schemas.EpisodeID("env-e2e", "eicu-canary-0", 0) {
		t.Fatalf("session: %d messages, %d tools, episode %v", len(msgs), len(tools), sess["episode_id"])
	}
	stepPath := "/v1/sessions/" + id + "/step"
	grep := `H="MEDGYM-CAN"; grep -rhoasE --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "${H}ARY-[0-9]+" / | head -1; echo searched`
	r0 := c.must(200, "POST", stepPath, map[string]any{"turn": 0, "content": act("terminal", map[string]any{"cmd": grep}), "token_ids": []int{1, 2}, "logprobs": []float64{-0.1, -0.2}})
	if r0["done"] != false || !strings.Contains(r0["observation"].(string), "searched") {
		t.Fatalf("step 0: %v", r0)
	}
	if again := c.must(200, "POST", stepPath, map[string]any{"turn": 0, "content": act("terminal", map[string]any{"cmd": grep})}); fmt.Sprint(again) != fmt.Sprint(r0) {
		t.Fatalf("turn 0 retried with its reply answered %v, first %v", again, r0)
	}
	if again := c.must(200, "POST", stepPath, map[string]any{"turn": 0, "content": "something else"}); !sameButIgnored(again, r0) {
		t.Fatalf("turn 0 retried with another reply answered %v, first %v: want the first, marked reply_ignored", again, r0)
	}
	if out := c.must(409, "POST", stepPath, map[string]any{"turn": 2, "content": "x"}); errCode(out) != "turn_out_of_order" {
		t.Fatalf("turn ahead: %v", out)
	}
	huge := map[string]any{"turn": 1, "content": strings.Repeat("x", 5<<20)}
	if out := c.must(413, "POST", stepPath, huge); errCode(out) != "body_too_large" {
		t.Fatalf("5 MB content: %v", out)
	}
	r1 := c.must(200, "POST", stepPath, map[string]any{"turn": 1, "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
		"function": map[string]any{"name": "validate_code", "arguments": mustJSON(map[string]string{"code": canarySearchPy})}}}})
	if r1["done"] != false || !strings.Contains(r1["observation"].(string), "none") || r1["info"].(map[string]any)["action"] != "validate_code" {
		t.Fatalf("step 1: %v", r1)
	}
	r2 := c.must(200, "POST", stepPath, map[string]any{"turn": 2, "content": act("request_info",
		map[string]any{"data_path": "/data/eicu/../../verifier/eicu/test.jsonl", "info_type": "term", "keyterm": "MEDGYM"})})
	if r2["done"] != false {
		t.Fatalf("step 2: %v", r2)
	}
	r3 := c.must(200, "POST", stepPath, map[string]any{"turn": 3, "content": act("answer", map[string]any{"answer": "I do not know"})})
	info := r3["info"].(map[string]any)
	if r3["done"] != true || r3["reward"] != 0.0 || info["outcome"] != "incorrect" || info["row"] == nil {
		t.Fatalf("final step: %v", r3)
	}
	if out := c.must(409, "POST", stepPath, map[string]any{"turn": 4, "content": "x"}); errCode(out) != "session_done" {
		t.Fatalf("step after done: %v", out)
	}
	st := c.must(200, "GET", "/v1/sessions/"+id, nil)
	if st["done"] != true || st["outcome"] != "incorrect" || st["turn"] != 4.0 {
		t.Fatalf("session status: %v", st)
	}
	if out := c.must(200, "DELETE", "/v1/sessions/"+id, nil); out["outcome"] != "incorrect" {
		t.Fatalf("close of a done session: %v", out)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if out := c.must(404, m, "/v1/sessions/nope", nil); errCode(out) != "unknown_session" {
			t.Fatalf("%s unknown session: %v", m, out)
		}
	}
	if out := c.must(404, "POST", "/v1/sessions/nope/step", map[string]any{"turn": 0, "content": "x"}); errCode(out) != "unknown_session" {
		t.Fatalf("step of an unknown session: %v", out)
	}
	c.must(200, "GET", "/openapi.json", nil)
	p.stop(t)
	rows := readRun(t, context.Background(), filepath.Join(dir, "store"), "env-e2e")
	if len(rows) != 1 || rows[0].Outcome != "incorrect" || len(rows[0].Turns) != 4 || rows[0].Model != "m" ||
		rows[0].SchemaVersion != parquet.SchemaVersion || rows[0].VerifierVersion == "" {
		t.Fatalf("stored rows: %+v", rows)
	}
	if tr := rows[0].Turns[0]; tr.RawText != act("terminal", map[string]any{"cmd": grep}) || !slices.Equal(tr.CompletionTokenIDs, []int32{1, 2}) {
		t.Fatalf("turn 0 stored as %+v", tr)
	}
	for _, tr := range rows[0].Turns {
		if strings.Contains(tr.Observation, canary) || strings.Contains(tr.Stdout, canary) {
			t.Errorf("turn %d: the canary reached the agent", tr.Index)
		}
	}
	checkContract(t, chk, canary)
}

// sameButIgnored reports whether a retried step's answer is first's,
// marked reply_ignored (its reply was not the one the turn was played with).
func sameButIgnored(again, first map[string]any) bool {
	if again["reply_ignored"] != true {
		return false
	}
	rest := maps.Clone(again)
	delete(rest, "reply_ignored")
	return fmt.Sprint(rest) == fmt.Sprint(first)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestEnvAPISameAsRun: the same task played by `medgym run` (scripted
// model) and through the API with the same replies gives the same prompt,
// observations, outcome and reward, and rows that differ only in ids,
// times and the model-side counts the API client did not send.
func TestEnvAPISameAsRun(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	lib := canaryLibrary(t, "MEDGYM-CANARY-same")
	replies := []string{
		"Let me look first.",
		act("terminal", map[string]any{"cmd": "ls /data/eicu"}),
		act("validate_code", map[string]any{"code": "import pandas as pd\nprint(pd.read_csv('/data/eicu/patient.csv').age[0])"}),
		act("answer", map[string]any{"answer": "63"}),
	}
	model := fakellm.New(fakellm.Config{Policy: fakellm.PolicyScript, Script: replies, Seed: 1, Model: "m"})
	srv := httptest.NewServer(model)
	defer srv.Close()
	f := defaultFlags(t) // medgym run's defaults, as the API's
	f.Library = lib
	f.Policy, f.LLMURL, f.Model, f.RunID = "openai", srv.URL+"/v1", "m", "same-run"
	f.Datasets, f.Split, f.TaskIDs, f.MaxTurns = "eicu", "test", "eicu-canary-0", 6
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		t.Fatal(err)
	}
	ran := readRun(t, ctx, f.Store, "same-run")

	dir := t.TempDir()
	p := startEnv(t, lib, dir)
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, chk, p.url)
	sess := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0",
		"options": map[string]any{"max_turns": 6, "model": "m", "run_id": "same-api"}})
	var last map[string]any
	for i, r := range replies {
		last = c.must(200, "POST", "/v1/sessions/"+sess["session_id"].(string)+"/step", map[string]any{"turn": i, "content": r})
	}
	p.stop(t)
	api := readRun(t, ctx, filepath.Join(dir, "store"), "same-api")
	if len(ran) != 1 || len(api) != 1 {
		t.Fatalf("%d rows from the run, %d from the API", len(ran), len(api))
	}
	a, b := ran[0], api[0]
	if last["reward"] != b.Reward || last["info"].(map[string]any)["outcome"] != b.Outcome || b.Outcome != a.Outcome || b.Reward != a.Reward {
		t.Fatalf("API's last step %v, row %s/%g, the run's %s/%g", last, b.Outcome, b.Reward, a.Outcome, a.Reward)
	}
	msgs := sess["messages"].([]any)
	for i := range 2 {
		if m := msgs[i].(map[string]any); m["content"] != a.Messages[i].Content || m["role"] != a.Messages[i].Role {
			t.Fatalf("prompt message %d differs from the run's", i)
		}
	}
	for _, r := range []*parquet.Row{&a, &b} {
		r.RunID, r.EpisodeID, r.StartedAt, r.FinishedAt = "", "", time.Time{}, time.Time{}
		r.PromptTokens, r.CompletionTokens = 0, 0
		for i := range r.Turns {
			t := &r.Turns[i]
			t.DurationMS, t.LLMLatencyMS, t.PromptTokens, t.CompletionTokens = 0, 0, 0, 0
			t.PromptTokenIDs, t.CompletionTokenIDs, t.CompletionLogprobs, t.FinishReason = nil, nil, nil, ""
		}
	}
	ja, _ := json.MarshalIndent(a, "", " ")
	jb, _ := json.MarshalIndent(b, "", " ")
	if !bytes.Equal(ja, jb) {
		t.Fatalf("rows differ beyond ids, times and model-side counts:\nrun: %s\napi: %s", ja, jb)
	}
	checkContract(t, chk, "")
}

// TestEnvAPIRestart: the server is stopped mid-episode and started again
// on the same state: the session continues from its last step, and the
// step retried with the same turn is answered from the store, not played
// again (the stored episode has each turn once).
func TestEnvAPIRestart(t *testing.T) {
	needSandbox(t)
	lib := canaryLibrary(t, "MEDGYM-CANARY-restart")
	dir := t.TempDir()
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := startEnv(t, lib, dir)
	c := newAPIClient(t, chk, p.url)
	sess := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-1", "options": map[string]any{"run_id": "env-restart"}})
	path := "/v1/sessions/" + sess["session_id"].(string)
	first := c.must(200, "POST", path+"/step", map[string]any{"turn": 0, "content": act("validate_code", map[string]any{"code": "print(6*7)"})})
	p.stop(t)

	p2 := startEnv(t, lib, dir)
	c2 := newAPIClient(t, chk, p2.url)
	if st := c2.must(200, "GET", path, nil); st["turn"] != 1.0 || st["done"] != false {
		t.Fatalf("after the restart the session is %v", st)
	}
	if again := c2.must(200, "POST", path+"/step", map[string]any{"turn": 0, "content": act("validate_code", map[string]any{"code": "print(0)"})}); !sameButIgnored(again, first) {
		t.Fatalf("retried turn 0 after the restart: %v, first %v", again, first)
	}
	last := c2.must(200, "POST", path+"/step", map[string]any{"turn": 1, "content": act("answer", map[string]any{"answer": "42"})})
	if last["done"] != true {
		t.Fatalf("final step: %v", last)
	}
	p2.stop(t)
	rows := readRun(t, context.Background(), filepath.Join(dir, "store"), "env-restart")
	if len(rows) != 1 || len(rows[0].Turns) != 2 || !strings.Contains(rows[0].Turns[0].ParamsJSON, "6*7") || rows[0].Turns[0].Stdout != "42\n" {
		t.Fatalf("stored: %+v", rows)
	}
	checkContract(t, chk, "")
}

// TestEnvAPICapTokenReap: with a token configured every /v1 request needs
// it; the cap on live sessions answers 429 with Retry-After; a client that
// vanishes is reaped and its episode stored as abandoned, which frees its
// slot.
func TestEnvAPICapTokenReap(t *testing.T) {
	needSandbox(t)
	lib := canaryLibrary(t, "MEDGYM-CANARY-cap")
	dir := t.TempDir()
	t.Setenv("MEDGYM_ENV_TOKEN", "s3cret")
	p := startEnv(t, lib, dir, "--max-sessions", "1", "--idle", "2s", "--reap-every", "200ms")
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, chk, p.url)
	code, hdr, out := c.do("GET", "/v1/tasks", nil)
	if code != 401 || errCode(out) != "unauthorized" || hdr.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d %v", code, out)
	}
	c.token = "wrong"
	c.must(401, "GET", "/v1/tasks", nil)
	c.token = "s3cret"
	c.must(200, "GET", "/v1/tasks", nil)
	body := map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": "env-cap"}}
	s := c.must(201, "POST", "/v1/sessions", body)
	code, hdr, out = c.do("POST", "/v1/sessions", body)
	if code != 429 || errCode(out) != "too_many_sessions" || hdr.Get("Retry-After") == "" {
		t.Fatalf("over the cap: %d %v (Retry-After %q)", code, out, hdr.Get("Retry-After"))
	}
	path := "/v1/sessions/" + s["session_id"].(string)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := c.must(200, "GET", path, nil)
		if st["done"] == true {
			if st["outcome"] != "abandoned" {
				t.Fatalf("reaped session: %v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle session was not reaped: %v", st)
		}
		time.Sleep(300 * time.Millisecond)
	}
	c.must(201, "POST", "/v1/sessions", body) // the slot is free again
	p.stop(t)
	rows := readRun(t, context.Background(), filepath.Join(dir, "store"), "env-cap")
	if len(rows) != 1 || rows[0].Outcome != string(schemas.OutcomeAbandoned) || rows[0].Reward != 0 {
		t.Fatalf("stored: %+v", rows)
	}
	checkContract(t, chk, "")
}

// TestEnvAPIRestartMidStep: the server stops while a step's code is
// running in the sandbox (the client's request cut off with it) and starts
// again on the same state: the step, retried with the same turn, gets the
// execution's answer, and the stored episode has that turn once.
func TestEnvAPIRestartMidStep(t *testing.T) {
	needSandbox(t)
	lib := canaryLibrary(t, "MEDGYM-CANARY-midstep")
	dir := t.TempDir()
	acks := []string{"--sandbox-ack-wait", "5s", "--verifier-ack-wait", "5s", "--ack-wait", "5s"}
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := startEnv(t, lib, dir, acks...)
	c := newAPIClient(t, chk, p.url)
	sess := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": "env-midstep"}})
	path := "/v1/sessions/" + sess["session_id"].(string)
	slow := act("validate_code", map[string]any{"code": "import time\ntime.sleep(4)\nprint('slept')"})
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		// This request dies with the server: its answer is lost.
		req, _ := http.NewRequest("POST", p.url+path+"/step", strings.NewReader(mustJSON(map[string]any{"turn": 0, "content": slow})))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		if st := c.must(200, "GET", path, nil); st["executing"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the step never started executing")
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.stop(t)
	<-cut

	p2 := startEnv(t, lib, dir, acks...)
	c2 := newAPIClient(t, chk, p2.url)
	r := c2.must(200, "POST", path+"/step", map[string]any{"turn": 0, "content": act("validate_code", map[string]any{"code": "print('other')"})})
	if r["observation"] != "slept\n" || r["done"] != false {
		t.Fatalf("the retried step after the restart answered %v", r)
	}
	last := c2.must(200, "POST", path+"/step", map[string]any{"turn": 1, "content": act("answer", map[string]any{"answer": "slept"})})
	if last["done"] != true {
		t.Fatalf("final step: %v", last)
	}
	p2.stop(t)
	rows := readRun(t, context.Background(), filepath.Join(dir, "store"), "env-midstep")
	if len(rows) != 1 || len(rows[0].Turns) != 2 || rows[0].Turns[0].RawText != slow || rows[0].Turns[0].Stdout != "slept\n" {
		t.Fatalf("stored: %+v", rows)
	}
	checkContract(t, chk, "")
}
