package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/apitest"
	"github.com/medgym/medgym/services/env/internal/httpapi"
	"github.com/medgym/medgym/services/env/internal/session"
)

// fakeSessions answers with fixed values; session "done" is over, "busy"
// times out, "boom" fails in the store.
type fakeSessions struct{}

var view = schemas.TaskView{ID: "t-1", Dataset: "ds", Split: "test", Question: "q?", AnswerType: "number",
	PermittedActions: []string{"validate_code"}, Harness: "SECRET-HARNESS <<insert solution here>>"}

func (fakeSessions) Create(_ context.Context, r session.CreateRequest) (session.Created, error) {
	if r.TaskID != view.ID {
		return session.Created{}, fmt.Errorf("%w %q", session.ErrUnknownTask, r.TaskID)
	}
	if e := r.Options.EpisodeTimeoutSec; e != nil && *e != 43 {
		return session.Created{}, fmt.Errorf("%w: episode_timeout_sec %d (the tests send 43)", session.ErrInvalid, *e)
	}
	if r.Options.RunID == "full" {
		return session.Created{}, session.ErrTooMany
	}
	if r.Options.RunID == "taken" {
		return session.Created{}, fmt.Errorf("%w: run_id taken is another's", session.ErrRunExists)
	}
	s := session.Session{ID: "s1", State: schemas.EpisodeState{Request: schemas.EpisodeRequest{RunID: "r", EpisodeID: "e", Task: view,
		Options: schemas.DefaultOptions()}, Messages: []schemas.ChatMessage{{Role: "system", Content: "sys"}, {Role: "user", Content: "q?"}}}}
	return session.Created{Session: s, Messages: s.State.Messages, Tools: agent.Tools(view, agent.PromptOptions{AllowAnswer: true})}, nil
}

func (fakeSessions) Prompt(r session.CreateRequest) (session.Prompt, error) {
	if r.TaskID != view.ID {
		return session.Prompt{}, fmt.Errorf("%w %q", session.ErrUnknownTask, r.TaskID)
	}
	if r.Options.EndOn != nil && *r.Options.EndOn != "both" {
		return session.Prompt{}, fmt.Errorf("%w: end_on %q (the fake knows both)", session.ErrInvalid, *r.Options.EndOn)
	}
	return session.Prompt{Task: view, Messages: []schemas.ChatMessage{{Role: "system", Content: "sys"}, {Role: "user", Content: "q?"}},
		Tools: agent.Tools(view, agent.PromptOptions{AllowAnswer: true})}, nil
}

func (f fakeSessions) Get(ctx context.Context, id string) (session.Session, error) {
	if id != "s1" {
		return session.Session{}, session.ErrUnknownSession
	}
	c, _ := f.Create(ctx, session.CreateRequest{TaskID: view.ID})
	return c.Session, nil
}

func (fakeSessions) Step(_ context.Context, id string, r session.StepRequest) (session.StepResult, error) {
	switch id {
	case "s1":
	case "done":
		return session.StepResult{}, session.ErrDone
	case "busy":
		return session.StepResult{}, session.ErrStepTimeout
	case "boom":
		return session.StepResult{}, errors.New("nats: timeout")
	default:
		return session.StepResult{}, session.ErrUnknownSession
	}
	if r.Turn > 0 {
		return session.StepResult{}, &session.TurnError{Got: r.Turn, Want: 0}
	}
	return session.StepResult{Observation: "echo: " + r.Content, Info: session.StepInfo{Turn: r.Turn, Action: "validate_code"},
		ReplyIgnored: r.Content == "a retry with another reply"}, nil
}

func (fakeSessions) Close(_ context.Context, id string) (session.Closed, error) {
	if id != "s1" {
		return session.Closed{}, session.ErrUnknownSession
	}
	return session.Closed{Session: session.Session{ID: id}, Outcome: schemas.OutcomeAbandoned, Row: &session.Row{RunID: "r", EpisodeID: "e", Dataset: "ds"}}, nil
}

func (fakeSessions) Live() int { return 1 }

type fakeCatalog struct{}

func (fakeCatalog) Find(string, string, string) (schemas.TaskView, error) { return view, nil }
func (fakeCatalog) List(ds, _ string, _, _ int) ([]schemas.TaskView, int, error) {
	if ds != "" && ds != "ds" {
		return nil, 0, session.ErrUnknownDataset
	}
	return []schemas.TaskView{view}, 1, nil
}
func (fakeCatalog) Datasets() []string { return []string{"ds"} }

// TestContractAndJunk: every response, to good and bad requests alike,
// matches openapi.json, none is a 5xx fault, each status is the one the
// input calls for, and no response shows the harness.
func TestContractAndJunk(t *testing.T) {
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.Handler(fakeSessions{}, fakeCatalog{}, httpapi.Options{Token: "tok", MaxBody: 1 << 16}))
	defer srv.Close()
	client := &http.Client{Transport: chk}
	big := `{"turn": 0, "content": "` + strings.Repeat("x", 5<<20) + `"}`
	cases := []struct {
		method, path, body string
		noAuth             bool
		ctype              string
		want               int
		code               string
	}{
		{"GET", "/healthz", "", true, "", 200, ""},
		{"GET", "/openapi.json", "", true, "", 200, ""},
		{"GET", "/v1/tasks", "", true, "", 401, "unauthorized"},
		{"GET", "/v1/tasks", "", false, "", 200, ""},
		{"GET", "/v1/tasks?limit=0", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?offset=-1", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?limit=abc", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?dataset=nope", "", false, "", 404, "unknown_dataset"},
		{"GET", "/v1/tasks?split=" + strings.Repeat("s", 257), "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?dataset=" + strings.Repeat("d", 257), "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?dataset=ds&split=" + strings.Repeat("%C3%A9", 256), "", false, "", 200, ""}, // 256 characters, 512 bytes
		{"POST", "/v1/tasks", "", false, "", 405, "method_not_allowed"},
		{"GET", "/v1/tasks/t-1/prompt", "", false, "", 200, ""},
		{"GET", "/v1/tasks/t-1/prompt?endon=both", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?datset=ds", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?offset=&offset=zZ", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks/t-1/prompt?end_on=both&dataset=ds", "", false, "", 200, ""},
		{"GET", "/v1/tasks/t-1/prompt?end_on=never", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks/t-1/prompt?end_on=", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?limit=", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks?offset=", "", false, "", 400, "bad_request"},
		{"GET", "/v1/tasks/nope/prompt", "", false, "", 404, "unknown_task"},
		{"GET", "/v1/tasks/t-1/prompt", "", true, "", 401, "unauthorized"},
		{"GET", "/v1/tasks/t-1/prompt?split=" + strings.Repeat("s", 257), "", false, "", 400, "bad_request"},
		{"POST", "/v1/tasks/t-1/prompt", "", false, "", 405, "method_not_allowed"},
		{"POST", "/v1/sessions", `{"task_id": "t-1"}`, false, "", 201, ""},
		{"POST", "/v1/sessions", `{"task_id": "t-1", "options": {"run_id": "full"}}`, false, "", 429, "too_many_sessions"},
		{"POST", "/v1/sessions", `{"task_id": "t-1", "options": {"run_id": "taken"}}`, false, "", 409, "run_exists"},
		{"POST", "/v1/sessions", `{"task_id": "t-1", "options": {"episode_timeout_sec": 43.0, "max_turns": 4e0}}`, false, "", 201, ""},
		{"POST", "/v1/sessions", `{"task_id": "t-1", "options": {"episode_timeout_sec": 43.5}}`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions", `{"task_id": "t-1", "options": {"episode_timeout_sec": 43.0, "nope": 1}}`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions", `{"task_id": "nope"}`, false, "", 404, "unknown_task"},
		{"POST", "/v1/sessions", `{"task_id": ""}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions", `{"task_id": " "}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions", `{"task": "t-1"}`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions", `[1, 2]`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions", `{"task_id": "t-1"} {}`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions", `{"task_id": 7}`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions", `{"task_id": "t-1"}`, false, "text/plain", 415, "unsupported_media_type"},
		{"POST", "/v1/sessions", "\x00\xff", false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions", "", false, "", 400, "malformed_body"},
		{"GET", "/v1/sessions/s1", "", false, "", 200, ""},
		{"GET", "/v1/sessions/zzz", "", false, "", 404, "unknown_session"},
		{"DELETE", "/v1/sessions/s1", "", false, "", 200, ""},
		{"DELETE", "/v1/sessions/zzz", "", false, "", 404, "unknown_session"},
		{"PUT", "/v1/sessions/s1", "", false, "", 405, "method_not_allowed"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi"}`, false, "", 200, ""},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "a retry with another reply"}`, false, "", 200, ""},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"type": "function", "function": {"name": "validate_code", "arguments": "{\"code\": \"print(1)\"}"}}]}`, false, "", 200, ""},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"function": {"name": "validate_code", "arguments": {"code": "print(1)"}}}]}`, false, "", 200, ""},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"function": {"name": "validate_code", "arguments": "[1]"}}]}`, false, "", 200, ""},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"function": {"name": " ", "arguments": "{}"}}]}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{}]}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"x": 1, "function": {"name": "answer", "arguments": ""}}]}`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "a", "tool_calls": [{"function": {"name": "x", "arguments": "{}"}}]}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions/s1/step", `{"content": "hi"}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions/s1/step", `{"turn": -1, "content": "hi"}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 1e99, "content": "hi"}`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0.0, "content": "hi"}`, false, "", 200, ""},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi", "usage": {"prompt_tokens": -1}}`, false, "", 400, "bad_request"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi", "logprobs": [-1e300]}`, false, "", 400, "malformed_body"},
		{"POST", "/v1/sessions/s1/step", `{"turn": 3, "content": "hi"}`, false, "", 409, "turn_out_of_order"},
		{"POST", "/v1/sessions/done/step", `{"turn": 3, "content": "hi"}`, false, "", 409, "session_done"},
		{"POST", "/v1/sessions/busy/step", `{"turn": 0, "content": "hi"}`, false, "", 504, "step_timeout"},
		{"POST", "/v1/sessions/boom/step", `{"turn": 0, "content": "hi"}`, false, "", 503, "unavailable"},
		{"POST", "/v1/sessions/zzz/step", `{"turn": 0, "content": "hi"}`, false, "", 404, "unknown_session"},
		{"POST", "/v1/sessions/s1/step", big, false, "", 413, "body_too_large"},
		{"GET", "/v1/nothing", "", false, "", 404, "not_found"},
		{"GET", "/v1/nothing", "", true, "", 401, "unauthorized"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if !c.noAuth {
			req.Header.Set("Authorization", "Bearer tok")
		}
		if c.body != "" || c.method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || (c.code != "" && !strings.Contains(string(body), `"code":"`+c.code+`"`)) {
			t.Errorf("%s %s %.60s: %d %.200s, want %d %s", c.method, c.path, c.body, resp.StatusCode, body, c.want, c.code)
		}
		if c.want == 429 && resp.Header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
		if strings.Contains(string(body), "SECRET-HARNESS") {
			t.Errorf("%s %s shows the harness", c.method, c.path)
		}
	}
	for _, f := range chk.Failures() {
		t.Error(f)
	}
	if n := len(chk.Exchanges()); n != len(cases) {
		t.Fatalf("%d exchanges checked, want %d", n, len(cases))
	}
}

// TestDocumentSaysWhatServerChecks: the document itself refuses what the
// server answers 400 (content and tool_calls together, neither, an
// over-long filter) and accepts what the server takes (an integral float
// for an integer); each with its control.
func TestDocumentSaysWhatServerChecks(t *testing.T) {
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	tc := `"tool_calls": [{"function": {"name": "validate_code", "arguments": "{}"}}]`
	cases := []struct {
		method, path, body string
		valid              bool
	}{
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi"}`, true},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, ` + tc + `}`, true},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi", ` + tc + `}`, false},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0}`, false},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"function": {"name": " ", "arguments": ""}}]}`, false},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"function": {"name": "answer", "arguments": "{\\u0010"}}]}`, true},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"function": {"name": "answer", "arguments": ""}}]}`, true},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "tool_calls": [{"x": 1, "function": {"name": "answer", "arguments": ""}}]}`, false},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi", "usage": {"total_tokens": 3}}`, false},
		{"POST", "/v1/sessions", `{"task_id": "t-1", "options": {"episode_timeout_sec": 43.0}}`, true},
		{"POST", "/v1/sessions", `{"task_id": "t-1", "options": {"episode_timeout_sec": 43.5}}`, false},
		{"GET", "/v1/tasks?split=" + strings.Repeat("s", 256), "", true},
		{"GET", "/v1/tasks?split=" + strings.Repeat("s", 257), "", false},
		{"GET", "/v1/tasks?offset=2147483648", "", false},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi", "logprobs": [-1e300]}`, false},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi", "logprobs": [-1e30], "token_ids": [2147483647]}`, true},
		{"POST", "/v1/sessions/s1/step", `{"turn": 0, "content": "hi", "token_ids": [2147483648]}`, false},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, "http://127.0.0.1"+c.path, strings.NewReader(c.body))
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer tok")
		errs := chk.RequestErrors(req)
		if (len(errs) == 0) != c.valid {
			t.Errorf("%s %.60s %s: document errors %q, want valid=%v", c.method, c.path, c.body, errs, c.valid)
		}
	}
}

// TestErrorsSpeakTheAPI: a malformed body is answered in the API's terms
// (its fields and JSON types, never the server's Go types or its bus's
// errors), a long number is quoted back cut short and never parsed (a
// million digits once cost seconds of CPU and gigabytes of allocation),
// and the bearer scheme is matched case-insensitively (RFC 7235).
func TestErrorsSpeakTheAPI(t *testing.T) {
	h := httpapi.Handler(fakeSessions{}, fakeCatalog{}, httpapi.Options{Token: "tok", MaxBody: 2 << 20})
	do := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		return rec.Code, e.Error.Message
	}
	const step, create = "/v1/sessions/s1/step", "/v1/sessions"
	cases := []struct{ path, body, want string }{
		{step, `{"turn": "0", "content": "hi"}`, "turn: expected an integer (64 bits), got a string"},
		{step, `{"turn": 0, "content": 5}`, "content: expected a string, got a number"},
		{step, `{"turn": 0, "content": "hi", "token_ids": [1.5]}`, "token_ids: expected an integer (32 bits), got the number 1.5"},
		{step, `{"turn": 0, "content": "hi", "usage": []}`, "usage: expected an object, got an array"},
		{step, `{"turn": 0, "content": "hi", "nope": 1}`, `unknown field "nope"`},
		{step, `{"turn": 0, "content": "hi"`, "ends in the middle of a JSON value"},
		{step, `{"turn": x}`, "not valid JSON (byte"},
		{step, ``, "the body is empty"},
		{step, `"hi"`, "the body: expected an object, got a string"},
		{create, `{"task_id": "t-1", "options": {"max_turns": "4"}}`, "options.max_turns: expected an integer (64 bits), got a string"},
		{create, `{"task_id": "t-1", "options": {"show_verdict": 1}}`, "options.show_verdict: expected true or false, got a number"},
		{create, `{"task_id": "t-1", "options": {"tags": {"k": 1}}}`, "options.tags: expected a string, got a number"},
	}
	for _, c := range cases {
		code, msg := do("POST", c.path, "Bearer tok", c.body)
		if code != 400 || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %q, want 400 with %q", c.body, code, msg, c.want)
		}
		for _, goTerm := range []string{"Go ", "struct", "stepBody", "createBody", "session.", "json:", "int32", "int64", "*"} {
			if strings.Contains(msg, goTerm) {
				t.Errorf("%s: %q names %q", c.body, msg, goTerm)
			}
		}
	}
	if code, msg := do("POST", "/v1/sessions/boom/step", "Bearer tok", `{"turn": 0, "content": "hi"}`); code != 503 || strings.Contains(msg, "nats") {
		t.Errorf("a bus failure: %d %q, want 503 without the bus's error", code, msg)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, msg := do("POST", step, "Bearer tok", `{"turn": 1`+strings.Repeat("0", 1_000_000)+`.0, "content": "hi"}`)
	runtime.ReadMemStats(&after)
	if code != 400 || len(msg) > 300 || !strings.Contains(msg, "(1000003 characters)") {
		t.Errorf("a million-digit turn: %d %.300q (%d bytes), want 400 quoting 40 digits and the length", code, msg, len(msg))
	}
	if mib := (after.TotalAlloc - before.TotalAlloc) >> 20; mib > 128 {
		t.Errorf("a million-digit turn allocated %d MiB: it was parsed", mib)
	}

	for _, c := range []struct {
		auth string
		want int
	}{
		{"Bearer tok", 200}, {"bearer tok", 200}, {"BEARER tok", 200}, {"Bearer  tok", 200},
		{"Basic tok", 401}, {"Bearertok", 401}, {"bearer", 401}, {"tok", 401}, {"bearer tok2", 401},
	} {
		if code, _ := do("GET", "/v1/tasks", c.auth, ""); code != c.want {
			t.Errorf("Authorization %q: %d, want %d", c.auth, code, c.want)
		}
	}
}
