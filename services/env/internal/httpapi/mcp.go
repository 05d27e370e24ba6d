package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/services/env/internal/session"
)

// The MCP door: /mcp?task_id=ID (Streamable HTTP, the official Go SDK).
// One MCP session is one medgym session of the task: its tools are the
// task's actions (as the session's prompt advertises them), a tool call is
// a step, and the opening messages are the server's instructions. The
// medgym session opens with the first tool call (initialize and tools/list
// open nothing and store nothing); /mcp?session_id=ID resumes one.

// DefaultMaxMCPSessions is Options.MaxMCPSessions when not set.
const DefaultMaxMCPSessions = 1024

// mcpInitWait is how long a new MCP session may take to send its
// initialized notification before its slot is given back.
const mcpInitWait = time.Minute

// mcpParams are the query parameters /mcp takes.
var mcpParams = []string{"task_id", "dataset", "split", "end_on", "max_turns", "loop_guard", "run_id", "model", "session_id"}

// mcpEpisode is one MCP session's medgym session.
type mcpEpisode struct {
	mu  sync.Mutex
	req session.CreateRequest
	c   *oeConn // nil until the first tool call
}

// mcpServerKey carries a new session's server from mcpHandler to the
// SDK's getServer.
type mcpServerKey struct{}

func (a *api) mcpHandler() http.Handler {
	// The SDK asks for a server on every request (for its protocol
	// versions); only a new session's initialize gets one of its own.
	versions := mcp.NewServer(&mcp.Implementation{Name: "medgym", Version: "1"}, nil)
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if srv, ok := r.Context().Value(mcpServerKey{}).(*mcp.Server); ok {
			return srv
		}
		return versions
	}, &mcp.StreamableHTTPOptions{
		JSONResponse:        true,
		SessionTimeout:      a.opt.SocketIdle,
		MaxRequestBodyBytes: a.opt.MaxBody,
		Logger:              a.opt.Log,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			// No server-to-client stream: every answer is a tool call's
			// (a held-open GET would hold a connection of --max-conns).
			w.Header().Set("Allow", "POST, DELETE")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET is not allowed on /mcp: this server sends no notifications (POST, DELETE)")
			return
		case http.MethodPost:
		case http.MethodDelete:
			h.ServeHTTP(w, r)
			return
		default:
			w.Header().Set("Allow", "POST, DELETE")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on /mcp (POST, DELETE)")
			return
		}
		// The body is read within the server's read timeout; then the call
		// may wait for its step like /v1's.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opt.MaxBody))
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body is over the server's limit of %d bytes", a.opt.MaxBody))
			return
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "malformed_body", "the body could not be read: it did not arrive within the server's read timeout, or the client went away")
			return
		}
		if r.Header.Get("Mcp-Session-Id") == "" {
			// A new session: an initialize, of a task that exists, with a
			// slot free.
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(body, &m) != nil || m.Method != "initialize" {
				writeError(w, http.StatusBadRequest, "bad_request", "a request without Mcp-Session-Id must be an initialize (one JSON-RPC request, not a batch)")
				return
			}
			srv, err := a.mcpServer(r)
			if err != nil {
				a.fail(w, r, err)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), mcpServerKey{}, srv))
		}
		a.holdOpen(w)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		h.ServeHTTP(w, r)
	})
}

// mcpRequest is the session a new MCP session asks for (its query).
func (a *api) mcpRequest(r *http.Request) (session.CreateRequest, error) {
	if err := unknownParam(r, mcpParams...); err != nil {
		return session.CreateRequest{}, fmt.Errorf("%w: %s", session.ErrInvalid, err.Error())
	}
	q := r.URL.Query()
	for _, k := range mcpParams {
		if utf8.RuneCountInString(q.Get(k)) > 512 {
			return session.CreateRequest{}, fmt.Errorf("%w: query parameter %s is longer than 512 characters", session.ErrInvalid, k)
		}
	}
	if id := q.Get("session_id"); id != "" {
		if len(q) > 1 {
			return session.CreateRequest{}, fmt.Errorf("%w: give session_id (resume) or task_id (a new session), not both", session.ErrInvalid)
		}
		s, err := a.s.Get(r.Context(), id)
		if err != nil {
			return session.CreateRequest{}, err
		}
		t, o := s.State.Request.Task, s.State.Request.Options
		return session.CreateRequest{TaskID: t.ID, Dataset: t.Dataset, Split: t.Split,
			Options: session.Options{EndOn: &o.EndOn, Compat: &o.Compat}}, nil
	}
	req := session.CreateRequest{TaskID: q.Get("task_id"), Dataset: q.Get("dataset"), Split: q.Get("split")}
	if strings.TrimSpace(req.TaskID) == "" {
		return req, fmt.Errorf("%w: query parameter task_id is required (/mcp?task_id=ID; GET /v1/tasks lists them), or session_id to resume a session", session.ErrInvalid)
	}
	if _, given := q["end_on"]; given {
		v := q.Get("end_on")
		req.Options.EndOn = &v
	}
	if _, given := q["loop_guard"]; given {
		v := q.Get("loop_guard")
		req.Options.LoopGuard = &v
	}
	if v := q.Get("max_turns"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return req, fmt.Errorf("%w: query parameter max_turns=%q: want an integer", session.ErrInvalid, v)
		}
		req.Options.MaxTurns = &n
	}
	req.Options.RunID, req.Options.Model = q.Get("run_id"), q.Get("model")
	return req, nil
}

// mcpServer is a new MCP session's server: the task's tools over one
// medgym session. It holds a slot of the cap until the session ends
// (DELETE, or idle for SessionTimeout), or, never initialized, for
// mcpInitWait.
func (a *api) mcpServer(r *http.Request) (*mcp.Server, error) {
	req, err := a.mcpRequest(r)
	if err != nil {
		return nil, err
	}
	p, err := a.s.Prompt(req)
	if err != nil {
		return nil, err
	}
	ep := &mcpEpisode{req: req}
	if id := r.URL.Query().Get("session_id"); id != "" {
		s, err := a.s.Get(r.Context(), id)
		if err != nil {
			return nil, err
		}
		ep.c = &oeConn{id: id, next: len(s.Steps), done: s.Score != nil}
		p.Messages = s.State.Messages
	}
	var instr strings.Builder
	for _, m := range p.Messages {
		fmt.Fprintf(&instr, "[%s]\n%s\n\n", m.Role, m.Content)
	}
	select {
	case a.mcpLive <- struct{}{}:
	default:
		return nil, fmt.Errorf("%w: %d MCP sessions are live (end one: DELETE /mcp with its Mcp-Session-Id)", session.ErrTooMany, cap(a.mcpLive))
	}
	var once sync.Once
	release := func() { once.Do(func() { <-a.mcpLive }) }
	unready := time.AfterFunc(mcpInitWait, release)
	srv := mcp.NewServer(&mcp.Implementation{Name: "medgym", Version: "1"}, &mcp.ServerOptions{Instructions: instr.String(),
		InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			if unready.Stop() {
				go func() {
					_ = req.Session.Wait()
					release()
				}()
			}
		}})
	for _, t := range p.Tools {
		srv.AddTool(&mcp.Tool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters},
			func(ctx context.Context, call *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return a.mcpCall(ctx, ep, call.Params.Name, call.Params.Arguments), nil
			})
	}
	return srv, nil
}

// mcpCall plays one tool call as the episode's next step. A medgym error
// is a tool error (isError), never a protocol one.
func (a *api) mcpCall(ctx context.Context, ep *mcpEpisode, name string, args json.RawMessage) *mcp.CallToolResult {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	fail := func(err error) *mcp.CallToolResult {
		e := a.classify(ctx, "mcp tool call", err)
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: e.code + ": " + e.msg}},
			StructuredContent: map[string]any{"error": map[string]string{"code": e.code, "message": e.msg}}}
	}
	if ep.c == nil {
		c, err := a.s.Create(ctx, ep.req)
		if err != nil {
			return fail(err)
		}
		ep.c = &oeConn{id: c.Session.ID}
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	text, err := agent.ToolCallReply(name, args)
	if err != nil {
		return fail(fmt.Errorf("%w: %s", session.ErrInvalid, err.Error()))
	}
	o, err := a.oeStep(ctx, ep.c, oeAction{stepBody: stepBody{Content: &text}})
	if err != nil {
		return fail(err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: o.Observation.Text}},
		StructuredContent: map[string]any{"session_id": ep.c.id, "turn": o.Observation.Turn, "reward": *o.Reward,
			"done": o.Done, "truncated": o.Observation.Truncated, "info": o.Observation.Info}}
}

// jsonRPCEnvelope answers a POST whose body is not a JSON-RPC message with
// a JSON-RPC error (HTTP 200, as OpenEnv's /mcp does); the rest goes to h.
func jsonRPCEnvelope(maxBody int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body is over the server's limit of %d bytes or did not arrive in time", maxBody))
			return
		}
		var env struct {
			JSONRPC string `json:"jsonrpc"`
			Method  string `json:"method"`
		}
		if json.Unmarshal(body, &env) != nil || env.JSONRPC != "2.0" || env.Method == "" {
			writeJSON(w, http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": nil,
				"error": map[string]any{"code": -32600, "message": "invalid request: send a JSON-RPC 2.0 request (MCP over Streamable HTTP; /mcp?task_id=ID)"}})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}
