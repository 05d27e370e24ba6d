package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	return session.StepResult{Observation: "echo: " + r.Content, Info: session.StepInfo{Turn: r.Turn, Action: "validate_code"}}, nil
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
