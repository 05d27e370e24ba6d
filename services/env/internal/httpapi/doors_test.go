package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/services/env/internal/httpapi"
	"github.com/medgym/medgym/services/env/internal/session"
)

// doorServer is the API (token "tok") over the fake sessions; every body
// it answers is checked for the harness (the fake's stand-in for ground
// truth) by the helpers below.
func doorServer(t *testing.T, opt httpapi.Options) *httptest.Server {
	t.Helper()
	opt.Token = "tok"
	srv := httptest.NewServer(httpapi.Handler(fakeSessions{}, fakeCatalog{}, opt))
	t.Cleanup(srv.Close)
	return srv
}

func noSecret(t *testing.T, b []byte) {
	t.Helper()
	if strings.Contains(string(b), "SECRET-HARNESS") || strings.Contains(string(b), "insert solution") {
		t.Fatalf("a response shows the harness: %s", b)
	}
}

func dial(t *testing.T, srv *httptest.Server, query string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/openenv/ws"+query,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer tok"}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

type wsReply struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// send writes one frame and reads the reply (err: the connection ended).
func send(t *testing.T, ws *websocket.Conn, typ websocket.MessageType, msg string) (wsReply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ws.Write(ctx, typ, []byte(msg)); err != nil {
		return wsReply{}, err
	}
	_, b, err := ws.Read(ctx)
	if err != nil {
		return wsReply{}, err
	}
	noSecret(t, b)
	var r wsReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("reply %s: %v", b, err)
	}
	return r, nil
}

func errCode(t *testing.T, r wsReply) (code, medgym string) {
	t.Helper()
	if r.Type != "error" {
		t.Fatalf("want an error, got %s %s", r.Type, r.Data)
	}
	var d struct{ Code, Message, Medgym_code string }
	_ = json.Unmarshal(r.Data, &d)
	if d.Message == "" {
		t.Fatalf("an error without a message: %s", r.Data)
	}
	return d.Code, d.Medgym_code
}

// TestOpenEnvSocket plays OpenEnv's session messages, junk among them:
// each junk message gets OpenEnv's error code and leaves the connection
// usable; a step follows the connection's turn; a session id nobody
// holds, a turn ahead and a step after the end are refused.
func TestOpenEnvSocket(t *testing.T) {
	srv := doorServer(t, httpapi.Options{MaxBody: 1 << 12})
	ws := dial(t, srv, "")
	steps := []struct {
		name, msg        string
		typ              websocket.MessageType
		wantType, wantOE string
		wantMedgym       string
	}{
		{"step before reset", `{"type":"step","data":{"content":"x"}}`, websocket.MessageText, "error", "SESSION_ERROR", ""},
		{"state before reset", `{"type":"state"}`, websocket.MessageText, "error", "SESSION_ERROR", ""},
		{"not JSON", `{"type":`, websocket.MessageText, "error", "INVALID_JSON", ""},
		{"binary frame", `{"type":"state"}`, websocket.MessageBinary, "error", "INVALID_JSON", ""},
		{"unknown type", `{"type":"mcp","data":{}}`, websocket.MessageText, "error", "UNKNOWN_TYPE", ""},
		{"unknown field", `{"type":"reset","data":{"task_id":"t-1"},"extra":1}`, websocket.MessageText, "error", "INVALID_JSON", ""},
		{"reset without task", `{"type":"reset","data":{}}`, websocket.MessageText, "error", "VALIDATION_ERROR", "bad_request"},
		{"reset of an unknown task", `{"type":"reset","data":{"task_id":"nope"}}`, websocket.MessageText, "error", "SESSION_ERROR", "unknown_task"},
		{"empty episode id", `{"type":"reset","data":{"task_id":"t-1","episode_id":""}}`, websocket.MessageText, "error", "VALIDATION_ERROR", "bad_request"},
		{"episode id over 128 characters", `{"type":"reset","data":{"task_id":"t-1","episode_id":"` + strings.Repeat("e", 129) + `"}}`, websocket.MessageText, "error", "VALIDATION_ERROR", "bad_request"},
		{"episode id with a control character", `{"type":"reset","data":{"task_id":"t-1","episode_id":"a\nb"}}`, websocket.MessageText, "error", "VALIDATION_ERROR", "bad_request"},
		{"forged session id", `{"type":"reset","data":{"session_id":"0123456789abcdef0123456789abcdef"}}`, websocket.MessageText, "error", "SESSION_ERROR", "unknown_session"},
		{"full", `{"type":"reset","data":{"task_id":"t-1","options":{"run_id":"full"}}}`, websocket.MessageText, "error", "CAPACITY_REACHED", "too_many_sessions"},
		{"reset", `{"type":"reset","data":{"task_id":"t-1","seed":3}}`, websocket.MessageText, "observation", "", ""},
		{"step with a bad action", `{"type":"step","data":{"content":"a","tool_calls":[{"function":{"name":"answer"}}]}}`, websocket.MessageText, "error", "VALIDATION_ERROR", "bad_request"},
		{"step", `{"type":"step","data":{"content":"print(1)","metadata":{}}}`, websocket.MessageText, "observation", "", ""},
		{"step ahead (the fake's session is at turn 0)", `{"type":"step","data":{"content":"print(1)"}}`, websocket.MessageText, "error", "SESSION_ERROR", "turn_out_of_order"},
		{"state", `{"type":"state"}`, websocket.MessageText, "state", "", ""},
	}
	for _, s := range steps {
		r, err := send(t, ws, s.typ, s.msg)
		if err != nil {
			t.Fatalf("%s: the connection ended: %v", s.name, err)
		}
		if s.wantType == "error" {
			oe, mg := errCode(t, r)
			if oe != s.wantOE || mg != s.wantMedgym {
				t.Errorf("%s: code %s (%s), want %s (%s): %s", s.name, oe, mg, s.wantOE, s.wantMedgym, r.Data)
			}
			continue
		}
		if r.Type != s.wantType {
			t.Fatalf("%s: got %s %s", s.name, r.Type, r.Data)
		}
		switch s.name {
		case "reset":
			var o struct {
				Observation struct {
					SessionID string       `json:"session_id"`
					Turn      int          `json:"turn"`
					Tools     []agent.Tool `json:"tools"`
				} `json:"observation"`
				Reward *float64 `json:"reward"`
				Done   bool     `json:"done"`
			}
			_ = json.Unmarshal(r.Data, &o)
			if o.Observation.SessionID != "s1" || o.Observation.Turn != 0 || o.Reward != nil || o.Done || len(o.Observation.Tools) == 0 {
				t.Errorf("reset: %s", r.Data)
			}
		case "step":
			var o struct {
				Observation struct {
					Text string `json:"text"`
					Turn int    `json:"turn"`
				} `json:"observation"`
				Reward *float64 `json:"reward"`
			}
			_ = json.Unmarshal(r.Data, &o)
			if o.Observation.Text != "echo: print(1)" || o.Observation.Turn != 1 || o.Reward == nil {
				t.Errorf("step: %s", r.Data)
			}
		case "state":
			var st struct {
				EpisodeID string `json:"episode_id"`
				StepCount *int   `json:"step_count"`
				SessionID string `json:"session_id"`
			}
			_ = json.Unmarshal(r.Data, &st)
			if st.EpisodeID != "e" || st.StepCount == nil || st.SessionID != "s1" {
				t.Errorf("state: %s", r.Data)
			}
		}
	}
	// A frame over MaxBody ends the connection (1009), whatever it holds.
	_, err := send(t, ws, websocket.MessageText, `{"type":"step","data":{"content":"`+strings.Repeat("x", 1<<13)+`"}}`)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("an oversized frame: %v, want close 1009", err)
	}
}

// TestOpenEnvSocketBounds: a socket needs the token, a resumed session
// must exist, an idle socket is closed, and close ends the connection.
func TestOpenEnvSocketBounds(t *testing.T) {
	srv := doorServer(t, httpapi.Options{SocketIdle: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/openenv/ws", nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a socket without the token: %v %v", err, resp)
	}
	// A page of another origin cannot open a socket with the browser's
	// credentials (cross-site WebSocket hijacking).
	if _, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/openenv/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer tok"}, "Origin": {"http://evil.example"}}}); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a socket from another origin: %v %v", err, resp)
	}
	ws := dial(t, srv, "?session_id=forged")
	_, b, err := ws.Read(ctx)
	if err != nil || !strings.Contains(string(b), "unknown_session") {
		t.Fatalf("resume of a forged session: %s %v", b, err)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after a forged session: %v, want close 1008", err)
	}
	// Resumed: the connection steps the session at its turn.
	ws = dial(t, srv, "?session_id=s1")
	if r, err := send(t, ws, websocket.MessageText, `{"type":"step","data":{"content":"x"}}`); err != nil || r.Type != "observation" {
		t.Fatalf("a step on a resumed session: %v %v", r, err)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("an idle socket: %v, want close 1008", err)
	}
	ws = dial(t, srv, "")
	if r, err := send(t, ws, websocket.MessageText, `{"type":"reset","data":{"task_id":"t-1"}}`); err != nil || r.Type != "observation" {
		t.Fatalf("reset: %v %v", r, err)
	}
	if _, err := send(t, ws, websocket.MessageText, `{"type":"close"}`); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("close: %v, want close 1000", err)
	}
}

func do(t *testing.T, method, url, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	noSecret(t, b)
	return resp.StatusCode, b
}

// TestOpenEnvHTTP: the stateless endpoints name their session; junk,
// unknown and forged sessions, a step after the end and oversized bodies
// get the API's errors; the validator's endpoints answer as OpenEnv's.
func TestOpenEnvHTTP(t *testing.T) {
	srv := doorServer(t, httpapi.Options{MaxBody: 1 << 12})
	u := srv.URL + httpapi.OpenEnvPrefix
	cases := []struct {
		name, method, path, body string
		want                     int
		has                      string
	}{
		{"health is open", "GET", "/health", "", 200, `"healthy"`},
		{"metadata", "GET", "/metadata", "", 200, `"description"`},
		{"schema", "GET", "/schema", "", 200, `"observation"`},
		{"openapi", "GET", "/openapi.json", "", 200, `"/reset"`},
		{"reset", "POST", "/reset", `{"task_id":"t-1"}`, 200, `"session_id":"s1"`},
		{"reset, no body", "POST", "/reset", ``, 400, "task_id is required"},
		{"reset, junk", "POST", "/reset", `{"task_id":`, 400, "malformed_body"},
		{"step", "POST", "/step", `{"session_id":"s1","turn":0,"action":{"content":"x"}}`, 200, `"echo: x"`},
		{"step without session", "POST", "/step", `{"turn":0,"action":{"content":"x"}}`, 400, "session_id is required"},
		{"step without turn", "POST", "/step", `{"session_id":"s1","action":{"content":"x"}}`, 400, "turn is required"},
		{"step, turns differ", "POST", "/step", `{"session_id":"s1","turn":0,"action":{"turn":1,"content":"x"}}`, 400, "differ"},
		{"step of a forged session", "POST", "/step", `{"session_id":"ffffffffffffffffffffffffffffffff","turn":0,"action":{"content":"x"}}`, 404, "unknown_session"},
		{"step after done", "POST", "/step", `{"session_id":"done","turn":3,"action":{"content":"x"}}`, 409, "session_done"},
		{"step, oversized", "POST", "/step", `{"session_id":"s1","turn":0,"action":{"content":"` + strings.Repeat("x", 1<<13) + `"}}`, 413, "body_too_large"},
		{"state", "GET", "/state?session_id=s1", "", 200, `"step_count"`},
		{"state without session", "GET", "/state", "", 400, "session_id is required"},
		{"state, unknown parameter", "GET", "/state?session_id=s1&x=1", "", 400, "unknown query parameter"},
		{"state of a forged session", "GET", "/state?session_id=forged", "", 404, "unknown_session"},
		{"mcp, not JSON-RPC (as OpenEnv's validator posts)", "POST", "/mcp", `{}`, 200, `"jsonrpc":"2.0"`},
		{"mcp, junk", "POST", "/mcp", `{"jsonrpc"`, 200, `-32600`},
		{"method", "DELETE", "/reset", "", 405, "method_not_allowed"},
		{"unknown path", "GET", "/nope", "", 404, "not_found"},
	}
	for _, c := range cases {
		code, b := do(t, c.method, u+c.path, c.body, "Content-Type", "application/json")
		if code != c.want || !strings.Contains(string(b), c.has) {
			t.Errorf("%s: %d %s, want %d with %s", c.name, code, b, c.want, c.has)
		}
	}
	var s struct{ Action, Observation, State map[string]any }
	_, b := do(t, "GET", u+"/schema", "")
	if json.Unmarshal(b, &s) != nil || s.Action == nil || s.Observation == nil || s.State == nil {
		t.Errorf("schema: %s", b)
	}
	for _, p := range []string{"/reset", "/state?session_id=s1", "/nope", "/ws", "/mcp"} {
		req, _ := http.NewRequest("GET", u+p, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d", p, resp.StatusCode)
		}
	}
	for _, p := range []string{"/health", "/schema", "/metadata", "/openapi.json"} {
		resp, err := http.Get(u + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s without the token: %d, want the open document", p, resp.StatusCode)
		}
	}
}

type bearer struct{ rt http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer tok")
	return b.rt.RoundTrip(r)
}

// TestMCPDoor: the official SDK's client lists exactly the task's actions
// as tools and plays a tool call as a step; a medgym error is a tool
// error; a session of an unknown task, a missing task, a GET stream and a
// request without the token are refused.
func TestMCPDoor(t *testing.T) {
	srv := doorServer(t, httpapi.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearer{http.DefaultTransport}}
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp?task_id=t-1", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	if in := cs.InitializeResult().Instructions; !strings.Contains(in, "q?") {
		t.Errorf("instructions %q: want the opening messages", in)
	}
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, tool := range tl.Tools {
		got = append(got, tool.Name)
		if s, _ := tool.InputSchema.(map[string]any); s["type"] != "object" {
			t.Errorf("tool %s: input schema %v", tool.Name, tool.InputSchema)
		}
	}
	for _, tool := range agent.Tools(view, agent.PromptOptions{AllowAnswer: true}) {
		want = append(want, tool.Function.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("tools %v, want the task's %v", got, want)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "validate_code", Arguments: map[string]any{"code": "print(1)"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	b, _ := json.Marshal(res)
	noSecret(t, b)
	if !strings.Contains(string(b), `"session_id":"s1"`) || !strings.Contains(string(b), "echo: ") {
		t.Errorf("call result: %s", b)
	}
	// The fake's session is at turn 0: the next call is a turn ahead.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "validate_code", Arguments: map[string]any{"code": "print(2)"}})
	if err != nil || !res.IsError {
		t.Fatalf("a refused step: %v %+v, want a tool error", err, res)
	}
	if b, _ := json.Marshal(res); !strings.Contains(string(b), "turn_out_of_order") {
		t.Errorf("a refused step: %s", b)
	}

	_, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp?task_id=nope", HTTPClient: hc}, nil)
	if err == nil {
		t.Error("a session of an unknown task connected")
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	accept := []string{"Content-Type", "application/json", "Accept", "application/json, text/event-stream"}
	for _, c := range []struct {
		name, method, path, body string
		want                     int
		has                      string
	}{
		{"unknown task", "POST", "/mcp?task_id=nope", init, 404, "unknown_task"},
		{"no task", "POST", "/mcp", init, 400, "task_id is required"},
		{"forged session", "POST", "/mcp?session_id=forged", init, 404, "unknown_session"},
		{"unknown parameter", "POST", "/mcp?task_id=t-1&x=1", init, 400, "unknown query parameter"},
		{"GET stream", "GET", "/mcp?task_id=t-1", "", 405, "method_not_allowed"},
		{"no session, not an initialize", "POST", "/mcp?task_id=t-1", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"answer"}}`, 400, "must be an initialize"},
		{"no session, a batch", "POST", "/mcp?task_id=t-1", "[" + init + "]", 400, "must be an initialize"},
		{"unknown MCP session", "POST", "/mcp", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, 404, ""},
	} {
		hdr := accept
		if c.name == "unknown MCP session" {
			hdr = append(slices.Clone(accept), "Mcp-Session-Id", "forged")
		}
		code, b := do(t, c.method, srv.URL+c.path, c.body, hdr...)
		if code != c.want || !strings.Contains(string(b), c.has) {
			t.Errorf("%s: %d %s, want %d with %s", c.name, code, b, c.want, c.has)
		}
	}
	req, _ := http.NewRequest("POST", srv.URL+"/mcp?task_id=t-1", strings.NewReader(init))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/mcp without the token: %d", resp.StatusCode)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// TestMCPSessionCap: MCP sessions beyond the cap are refused with 429
// (each holds a server and its goroutines even before it opens a medgym
// session); a session that ends gives its slot back.
func TestMCPSessionCap(t *testing.T) {
	srv := doorServer(t, httpapi.Options{MaxMCPSessions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearer{http.DefaultTransport}}
	connect := func() (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp?task_id=t-1", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	}
	first, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	code, b := do(t, "POST", srv.URL+"/mcp?task_id=t-1", init, "Content-Type", "application/json", "Accept", "application/json, text/event-stream")
	if code != http.StatusTooManyRequests || !strings.Contains(string(b), "too_many_sessions") {
		t.Fatalf("a session over the cap: %d %s", code, b)
	}
	// The session's own requests need no other slot.
	if res, err := first.CallTool(ctx, &mcp.CallToolParams{Name: "validate_code", Arguments: map[string]any{"code": "1"}}); err != nil || res.IsError {
		t.Fatalf("a call at the cap: %v %+v", err, res)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// The slot comes back once the server has seen the session end.
	for {
		second, err := connect()
		if err == nil {
			_ = second.Close()
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no slot after the first session ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slowSessions holds a step whose reply is "slow" until release closes.
type slowSessions struct {
	fakeSessions
	release chan struct{}
}

func (f slowSessions) Step(ctx context.Context, id string, r session.StepRequest) (session.StepResult, error) {
	if r.Content == "slow" {
		<-f.release
	}
	return f.fakeSessions.Step(ctx, id, r)
}

// TestOpenEnvSocketPingsDuringAStep: while a step waits for its execution,
// the server still answers the client's pings (OpenEnv's client closes a
// socket whose pings go unanswered for 20 s) and its idle clock is
// stopped; the step's answer then arrives.
func TestOpenEnvSocketPingsDuringAStep(t *testing.T) {
	f := slowSessions{release: make(chan struct{})}
	srv := httptest.NewServer(httpapi.Handler(f, fakeCatalog{}, httpapi.Options{SocketIdle: 200 * time.Millisecond}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/openenv/ws?session_id=s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"step","data":{"content":"slow"}}`)); err != nil {
		t.Fatal(err)
	}
	answer := make(chan []byte, 1)
	go func() {
		_, b, _ := ws.Read(ctx) // also reads the pongs
		answer <- b
	}()
	for range 3 { // longer than SocketIdle in all
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err := ws.Ping(pctx)
		pcancel()
		if err != nil {
			t.Fatalf("a ping during a step: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(f.release)
	if b := <-answer; !strings.Contains(string(b), `"type":"observation"`) {
		t.Fatalf("the step's answer: %s", b)
	}
}

// TestOpenEnvEpisodeID: a WebSocket reset may name its episode (OpenEnv's
// episode_id, as its validator's runtime check sends): the reset's
// metadata and the connection's state answer that name, medgym's own id
// beside it as medgym_episode_id, and step_count counts the steps; a
// reset without one keeps medgym's. HTTP has no connection to hold the
// name: its reset refuses one.
func TestOpenEnvEpisodeID(t *testing.T) {
	srv := doorServer(t, httpapi.Options{})
	ws := dial(t, srv, "")
	type state struct {
		EpisodeID       string `json:"episode_id"`
		MedgymEpisodeID string `json:"medgym_episode_id"`
		StepCount       int    `json:"step_count"`
		SessionID       string `json:"session_id"`
	}
	getState := func() state {
		r, err := send(t, ws, websocket.MessageText, `{"type":"state"}`)
		if err != nil || r.Type != "state" {
			t.Fatalf("state: %v %s %s", err, r.Type, r.Data)
		}
		var st state
		if err := json.Unmarshal(r.Data, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	r, err := send(t, ws, websocket.MessageText, `{"type":"reset","data":{"task_id":"t-1","seed":7,"episode_id":"probe-1"}}`)
	if err != nil || r.Type != "observation" {
		t.Fatalf("reset: %v %s %s", err, r.Type, r.Data)
	}
	var o struct {
		Observation struct {
			Metadata map[string]any `json:"metadata"`
		} `json:"observation"`
	}
	_ = json.Unmarshal(r.Data, &o)
	if o.Observation.Metadata["episode_id"] != "probe-1" || o.Observation.Metadata["medgym_episode_id"] != "e" {
		t.Errorf("reset metadata: %s", r.Data)
	}
	if st := getState(); st != (state{EpisodeID: "probe-1", MedgymEpisodeID: "e", StepCount: 0, SessionID: "s1"}) {
		t.Errorf("state after reset: %+v", st)
	}
	if r, err := send(t, ws, websocket.MessageText, `{"type":"step","data":{"content":"print(1)"}}`); err != nil || r.Type != "observation" {
		t.Fatalf("step: %v %s", err, r.Data)
	}
	if st := getState(); st.EpisodeID != "probe-1" || st.MedgymEpisodeID != "e" {
		t.Errorf("state after a step: %+v", st)
	}
	// A reset that names none: medgym's id, and no medgym_episode_id.
	if r, err := send(t, ws, websocket.MessageText, `{"type":"reset","data":{"task_id":"t-1"}}`); err != nil || r.Type != "observation" {
		t.Fatalf("second reset: %v %s", err, r.Data)
	}
	if st := getState(); st.EpisodeID != "e" || st.MedgymEpisodeID != "" {
		t.Errorf("state of a reset without episode_id: %+v", st)
	}
	if code, b := do(t, "POST", srv.URL+"/openenv/reset", `{"task_id":"t-1","episode_id":"probe-1"}`); code != 400 || !strings.Contains(string(b), "episode_id") {
		t.Errorf("HTTP reset with episode_id: %d %s", code, b)
	}
}

// TestOpenEnvAtRoot: with OpenEnvRoot the door also answers at the root,
// where OpenEnv's hub, its validator and a client given the bare host look
// for it (/health, /schema, /metadata, /ws, /reset, /openapi.json the
// door's, /mcp answering {} with a JSON-RPC error); /v1 and the door under
// /openenv are unchanged, /v1's document moves to /v1/openapi.json, and
// the token still guards every session-bearing path. Without the option
// the root has none of it.
func TestOpenEnvAtRoot(t *testing.T) {
	open := func(srv *httptest.Server, path string) (int, []byte) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	root := doorServer(t, httpapi.Options{OpenEnvRoot: true})
	for _, c := range []struct{ path, has string }{
		{"/health", `"healthy"`}, {"/openenv/health", `"healthy"`}, {"/metadata", `"description"`},
		{"/schema", `"observation"`}, {"/openapi.json", `"/reset"`}, {"/v1/openapi.json", `"/v1/sessions"`},
		{"/healthz", ""},
	} {
		if code, b := open(root, c.path); code != 200 || !strings.Contains(string(b), c.has) {
			t.Errorf("root mode, GET %s without a token: %d %.200s", c.path, code, b)
		}
	}
	for _, c := range []struct{ method, path string }{{"POST", "/reset"}, {"POST", "/step"}, {"GET", "/state"}, {"GET", "/ws"}, {"POST", "/mcp"}, {"POST", "/v1/sessions"}} {
		req, _ := http.NewRequest(c.method, root.URL+c.path, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("root mode, %s %s without the token: %d", c.method, c.path, resp.StatusCode)
		}
	}
	if code, b := do(t, "POST", root.URL+"/reset", `{"task_id":"t-1"}`); code != 200 || !strings.Contains(string(b), `"session_id":"s1"`) {
		t.Errorf("root mode, POST /reset: %d %s", code, b)
	}
	if code, b := do(t, "POST", root.URL+"/mcp", `{}`, "Content-Type", "application/json", "Accept", "application/json, text/event-stream"); code != 200 || !strings.Contains(string(b), `"jsonrpc"`) {
		t.Errorf("root mode, POST /mcp {}: %d %s", code, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(root.URL, "http")+"/ws", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer tok"}}})
	if err != nil {
		t.Fatalf("root mode, dial /ws: %v", err)
	}
	defer ws.CloseNow()
	if r, err := send(t, ws, websocket.MessageText, `{"type":"reset","data":{"task_id":"t-1"}}`); err != nil || r.Type != "observation" {
		t.Fatalf("root mode, reset over /ws: %v %s", err, r.Data)
	}

	plain := doorServer(t, httpapi.Options{})
	for _, path := range []string{"/health", "/schema", "/metadata"} {
		if code, _ := open(plain, path); code != 404 {
			t.Errorf("default mode, GET %s: %d, want 404", path, code)
		}
	}
	if code, b := open(plain, "/openapi.json"); code != 200 || !strings.Contains(string(b), `"/v1/sessions"`) {
		t.Errorf("default mode, /openapi.json is not /v1's: %d %.200s", code, b)
	}
}
