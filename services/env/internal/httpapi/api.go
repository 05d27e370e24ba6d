package httpapi

import (
	"bytes"
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/internal/session"
)

// OpenAPI is the API's OpenAPI 3.1 document.
//
//go:embed openapi.json
var OpenAPI []byte

// Sessions is what the API serves (session.Service).
type Sessions interface {
	Create(ctx context.Context, r session.CreateRequest) (session.Created, error)
	Prompt(r session.CreateRequest) (session.Prompt, error)
	Get(ctx context.Context, id string) (session.Session, error)
	Step(ctx context.Context, id string, r session.StepRequest) (session.StepResult, error)
	Close(ctx context.Context, id string) (session.Closed, error)
	Live() int
}

// Options configure the handler.
type Options struct {
	// Token, when set, is the bearer token every /v1 request must carry.
	Token string
	// MaxBody bounds a request body (default 1 MiB).
	MaxBody int64
	// RetryAfter is the Retry-After (seconds) of a 429, 503 or 504.
	RetryAfter int
	// LongWait, when set, is how long a step or close, which wait for an
	// execution or a score, may keep their connection once their body is
	// read: it replaces the server's read and write deadlines for them.
	LongWait time.Duration
	// SocketIdle bounds how long an OpenEnv WebSocket waits for its next
	// message, and how long an idle MCP session lives (DefaultSocketIdle).
	SocketIdle time.Duration
	// MaxMCPSessions caps the live MCP sessions (DefaultMaxMCPSessions);
	// more get 429 too_many_sessions.
	MaxMCPSessions int
	// OpenEnvRoot also serves the OpenEnv door at the server's root (/ws,
	// /reset, /step, /state, /schema, /metadata, /health), where OpenEnv's
	// hub, its validator and a client given the bare host look for it; the
	// root's /openapi.json is then the door's, /v1's stays at
	// /v1/openapi.json, and /mcp answers a body that is no JSON-RPC request
	// as the door's /mcp does.
	OpenEnvRoot bool
	Log         *slog.Logger
}

// DefaultMaxBody is the default request body limit.
const DefaultMaxBody = 1 << 20

type api struct {
	s       Sessions
	cat     session.Catalog
	opt     Options
	mcp     http.Handler  // the MCP door (mcp.go)
	mcpLive chan struct{} // a slot per live MCP session
}

// Handler returns the API.
func Handler(s Sessions, cat session.Catalog, opt Options) http.Handler {
	if opt.MaxBody <= 0 {
		opt.MaxBody = DefaultMaxBody
	}
	if opt.RetryAfter <= 0 {
		opt.RetryAfter = 2
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.SocketIdle <= 0 {
		opt.SocketIdle = DefaultSocketIdle
	}
	if opt.MaxMCPSessions <= 0 {
		opt.MaxMCPSessions = DefaultMaxMCPSessions
	}
	a := &api{s: s, cat: cat, opt: opt, mcpLive: make(chan struct{}, opt.MaxMCPSessions)}
	a.mcp = a.mcpHandler()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", a.methods(map[string]http.HandlerFunc{http.MethodGet: a.health}))
	if !opt.OpenEnvRoot {
		mux.HandleFunc("/openapi.json", a.methods(map[string]http.HandlerFunc{http.MethodGet: a.openapi}))
	}
	mux.HandleFunc("/v1/openapi.json", a.methods(map[string]http.HandlerFunc{http.MethodGet: a.openapi}))
	mux.HandleFunc("/v1/tasks", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodGet: a.tasks})))
	mux.HandleFunc("/v1/tasks/{id}/prompt", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodGet: a.prompt})))
	mux.HandleFunc("/v1/sessions", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodPost: a.create})))
	mux.HandleFunc("/v1/sessions/{id}", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodGet: a.get, http.MethodDelete: a.close})))
	mux.HandleFunc("/v1/sessions/{id}/step", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodPost: a.step})))
	a.openenvRoutes(mux, OpenEnvPrefix)
	if opt.OpenEnvRoot {
		a.openenvRoutes(mux, "")
	} else {
		mux.Handle("/mcp", a.authHandler(a.mcp))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if (strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, OpenEnvPrefix+"/")) && !a.authorized(r) {
			a.unauthorized(w)
			return
		}
		writeError(w, http.StatusNotFound, "not_found", "no such path: "+r.URL.Path)
	})
	return a.recoverer(mux)
}

func (a *api) recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				a.opt.Log.Error("panic in handler", "path", r.URL.Path, "panic", v)
				writeError(w, http.StatusInternalServerError, "internal", "internal error")
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func (a *api) methods(m map[string]http.HandlerFunc) http.HandlerFunc {
	allow := make([]string, 0, len(m))
	for k := range m {
		allow = append(allow, k)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if h, ok := m[r.Method]; ok {
			h(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
	}
}

func (a *api) authorized(r *http.Request) bool {
	if a.opt.Token == "" {
		return true
	}
	// RFC 7235: the scheme is case-insensitive, and one or more spaces
	// part it from the credentials.
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(a.opt.Token)) == 1
}

// holdOpen lets a request whose body is read wait for its answer beyond
// the server's read and write timeouts, up to LongWait from now (the
// session's own StepWait ends the wait first).
func (a *api) holdOpen(w http.ResponseWriter) {
	if a.opt.LongWait <= 0 {
		return
	}
	rc := http.NewResponseController(w)
	until := time.Now().Add(a.opt.LongWait)
	_ = rc.SetReadDeadline(until)
	_ = rc.SetWriteDeadline(until)
}

func (a *api) unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="medgym"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", "this server requires a bearer token (Authorization: Bearer TOKEN)")
}

func (a *api) authHandler(h http.Handler) http.Handler { return a.auth(h.ServeHTTP) }

func (a *api) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			a.unauthorized(w)
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"encode response"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var e errorBody
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}

// fail maps a domain error to its status and code and writes it.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := a.classify(r.Context(), r.Method+" "+r.URL.Path, err)
	if e.retry {
		w.Header().Set("Retry-After", strconv.Itoa(a.opt.RetryAfter))
	}
	writeError(w, e.status, e.code, e.msg)
}

// apiError is a domain error in the API's terms.
type apiError struct {
	status    int
	code, msg string
	retry     bool // the client may retry after RetryAfter
}

// classify maps a domain error to its status, code and message (every
// door answers the same error alike).
func (a *api) classify(ctx context.Context, where string, err error) apiError {
	retry := strconv.Itoa(a.opt.RetryAfter)
	var te *session.TurnError
	switch {
	case errors.As(err, &te):
		return apiError{status: http.StatusConflict, code: "turn_out_of_order", msg: err.Error()}
	case errors.Is(err, session.ErrUnknownSession):
		return apiError{status: http.StatusNotFound, code: "unknown_session", msg: err.Error()}
	case errors.Is(err, session.ErrUnknownTask):
		return apiError{status: http.StatusNotFound, code: "unknown_task", msg: err.Error()}
	case errors.Is(err, session.ErrUnknownDataset):
		return apiError{status: http.StatusNotFound, code: "unknown_dataset", msg: err.Error()}
	case errors.Is(err, session.ErrAmbiguousTask):
		return apiError{status: http.StatusBadRequest, code: "ambiguous_task", msg: err.Error()}
	case errors.Is(err, session.ErrInvalid):
		return apiError{status: http.StatusBadRequest, code: "bad_request", msg: err.Error()}
	case errors.Is(err, session.ErrDone):
		return apiError{status: http.StatusConflict, code: "session_done", msg: err.Error()}
	case errors.Is(err, session.ErrRunExists):
		return apiError{status: http.StatusConflict, code: "run_exists", msg: err.Error()}
	case errors.Is(err, session.ErrTooMany):
		return apiError{status: http.StatusTooManyRequests, code: "too_many_sessions", msg: err.Error() + "; retry after " + retry + " s", retry: true}
	case errors.Is(err, session.ErrStepTimeout):
		return apiError{status: http.StatusGatewayTimeout, code: "step_timeout", msg: err.Error(), retry: true}
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// The client went away; nobody reads this.
		return apiError{status: http.StatusServiceUnavailable, code: "unavailable", msg: "request cancelled"}
	}
	// The cause is the operator's (logged), not the client's.
	a.opt.Log.Error("request failed", "request", where, "err", err)
	return apiError{status: http.StatusServiceUnavailable, code: "unavailable", retry: true,
		msg: "the server could not complete the request (its bus or key-value store did not answer); retry after " + retry + " s"}
}

// decode reads a JSON body strictly into v; it writes the error itself.
func (a *api) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", fmt.Sprintf("Content-Type %q: send application/json", ct))
			return false
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opt.MaxBody))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body is over the server's limit of %d bytes", a.opt.MaxBody))
		return false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed_body", "the body could not be read: it did not arrive within the server's read timeout, or the client went away")
		return false
	}
	err = decodeStrict(body, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && strings.HasPrefix(te.Value, "number ") {
		// JSON Schema's integer includes 43.0; Go's decoder refuses it for an
		// int field. Write integral numbers as integers and try once more.
		if norm, ok := integralNumbers(body); ok {
			err = decodeStrict(norm, v)
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed_body", err.Error())
		return false
	}
	return true
}

// decodeStrict decodes exactly one JSON value with no unknown fields; its
// errors speak of the body's fields and JSON types (jsonError).
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return errors.New("the body holds more than one JSON value")
	}
	return nil
}

// maxShown bounds a value quoted back in an error message.
const maxShown = 40

// jsonError says what is wrong with a body in the API's terms (field
// names and JSON types, never the server's), keeping err for errors.As.
func jsonError(err error) error {
	var (
		te  *json.UnmarshalTypeError
		se  *json.SyntaxError
		msg string
	)
	switch {
	case errors.As(err, &te):
		where := te.Field
		if where == "" {
			where = "the body"
		}
		msg = fmt.Sprintf("%s: expected %s, got %s", where, jsonKind(te.Type), jsonValue(te.Value))
	case errors.As(err, &se):
		msg = fmt.Sprintf("the body is not valid JSON (byte %d: %s)", se.Offset, se.Error())
	case errors.Is(err, io.EOF):
		msg = "the body is empty: send one JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "the body ends in the middle of a JSON value"
	default:
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			msg = "unknown field " + f + " (the API's document lists the fields)"
		} else {
			msg = "the body is not the expected JSON object"
		}
	}
	return &bodyError{msg: msg, err: err}
}

// bodyError is a malformed body: msg for the client, err for errors.As.
type bodyError struct {
	msg string
	err error
}

func (e *bodyError) Error() string { return e.msg }
func (e *bodyError) Unwrap() error { return e.err }

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer (%d bits)", t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a JSON value"
}

// jsonValue describes the JSON value the decoder found ("string",
// "number 1.5", ...), a long number cut short.
func jsonValue(v string) string {
	if n, ok := strings.CutPrefix(v, "number "); ok {
		if len(n) > maxShown {
			n = n[:maxShown] + fmt.Sprintf("… (%d characters)", len(n))
		}
		return "the number " + n
	}
	switch v {
	case "array", "object":
		return "an " + v
	case "bool":
		return "true or false"
	}
	return "a " + v
}

// maxIntegral bounds the length of a number integralNumbers rewrites: an
// int64 written with a fraction or an exponent needs far fewer characters,
// and parsing a longer one (a million digits) costs seconds.
const maxIntegral = 64

// integralNumbers rewrites the numbers of a JSON body that are integers in
// value but not in form (43.0, 4.3e1) as integers; ok is false when the body
// is not one JSON value or has no such number. Numbers longer than
// maxIntegral are left as they are (and refused by the decoder).
func integralNumbers(body []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil || dec.More() {
		return nil, false
	}
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case json.Number:
			if len(x) > maxIntegral || !strings.ContainsAny(string(x), ".eE") {
				return x
			}
			f, _, err := big.ParseFloat(string(x), 10, 256, big.ToNearestEven)
			if err != nil || !f.IsInt() {
				return x
			}
			if i, acc := f.Int64(); acc == big.Exact {
				changed = true
				return json.Number(strconv.FormatInt(i, 10))
			}
		}
		return v
	}
	doc = walk(doc)
	if !changed {
		return nil, false
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

func (a *api) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "live_sessions": a.s.Live()})
}

func (a *api) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}

// taskView is the API's task: schemas.TaskView less the harness (context
// code the prompt never shows).
type taskView struct {
	ID               string   `json:"id"`
	Dataset          string   `json:"dataset"`
	Category         string   `json:"category,omitempty"`
	Split            string   `json:"split"`
	Instruction      string   `json:"instruction,omitempty"`
	Question         string   `json:"question"`
	Context          string   `json:"context,omitempty"`
	AnswerType       string   `json:"answer_type"`
	Resources        []string `json:"resources,omitempty"`
	PermittedActions []string `json:"permitted_actions"`
	OutputFiles      []string `json:"output_files,omitempty"`
}

func viewOf(t schemas.TaskView) taskView {
	pa := t.PermittedActions
	if pa == nil {
		pa = []string{}
	}
	return taskView{ID: t.ID, Dataset: t.Dataset, Category: t.Category, Split: t.Split, Instruction: t.Instruction,
		Question: t.Question, Context: t.Context, AnswerType: string(t.AnswerType), Resources: t.Resources,
		PermittedActions: pa, OutputFiles: t.OutputFiles}
}

func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	q := r.URL.Query()
	if _, given := q[name]; !given {
		return def, nil
	}
	s := q.Get(name) // given empty is refused, not taken as the default
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("query parameter %s=%q: want an integer in %d..%d", name, s, lo, hi)
	}
	return v, nil
}

// maxFilter bounds the dataset and split filters (openapi.json's maxLength).
const maxFilter = 256

// unknownParam names a query parameter outside known, or one given twice,
// if any: a misspelt or repeated filter is refused, not ignored.
func unknownParam(r *http.Request, known ...string) error {
	for k, v := range r.URL.Query() {
		if !slices.Contains(known, k) {
			return fmt.Errorf("unknown query parameter %q (known: %s)", k, strings.Join(known, ", "))
		}
		if len(v) > 1 {
			return fmt.Errorf("query parameter %q given %d times", k, len(v))
		}
	}
	return nil
}

func (a *api) tasks(w http.ResponseWriter, r *http.Request) {
	if err := unknownParam(r, "dataset", "split", "limit", "offset"); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	limit, err := intParam(r, "limit", 100, 1, 1000)
	if err == nil {
		var off int
		if off, err = intParam(r, "offset", 0, 0, 1<<31-1); err == nil {
			q := r.URL.Query()
			for _, name := range []string{"dataset", "split"} {
				if utf8.RuneCountInString(q.Get(name)) > maxFilter {
					writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("query parameter %s is longer than %d characters", name, maxFilter))
					return
				}
			}
			ts, total, err := a.cat.List(q.Get("dataset"), q.Get("split"), limit, off)
			if err != nil {
				a.fail(w, r, err)
				return
			}
			out := make([]taskView, len(ts))
			for i, t := range ts {
				out[i] = viewOf(t)
			}
			var next *int
			if off+len(ts) < total {
				n := off + len(ts)
				next = &n
			}
			writeJSON(w, http.StatusOK, map[string]any{"tasks": out, "total": total, "offset": off, "next_offset": next})
			return
		}
	}
	writeError(w, http.StatusBadRequest, "bad_request", err.Error())
}

// prompt answers a task's opening messages and tools under the end_on
// option (which decides whether answer is offered) and the prompt_mode
// option, opening no session.
func (a *api) prompt(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := unknownParam(r, "dataset", "split", "end_on", "prompt_mode"); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	for _, name := range []string{"dataset", "split"} {
		if utf8.RuneCountInString(q.Get(name)) > maxFilter {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("query parameter %s is longer than %d characters", name, maxFilter))
			return
		}
	}
	var opts session.Options
	if _, given := q["end_on"]; given {
		v := q.Get("end_on") // given empty is not the default: the session options refuse it
		opts.EndOn = &v
	}
	if _, given := q["prompt_mode"]; given {
		v := q.Get("prompt_mode")
		opts.PromptMode = &v
	}
	p, err := a.s.Prompt(session.CreateRequest{TaskID: r.PathValue("id"), Dataset: q.Get("dataset"), Split: q.Get("split"), Options: opts})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	tools := p.Tools
	if tools == nil {
		tools = []agent.Tool{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"task": viewOf(p.Task), "messages": p.Messages, "tools": tools})
}

type createBody struct {
	TaskID  string           `json:"task_id"`
	Dataset string           `json:"dataset"`
	Split   string           `json:"split"`
	Options *session.Options `json:"options"`
}

type sessionBody struct {
	SessionID string                `json:"session_id"`
	RunID     string                `json:"run_id"`
	EpisodeID string                `json:"episode_id"`
	Task      taskView              `json:"task"`
	Messages  []schemas.ChatMessage `json:"messages"`
	Tools     []agent.Tool          `json:"tools"`
	Turn      int                   `json:"turn"`
	MaxTurns  int                   `json:"max_turns"`
}

func (a *api) create(w http.ResponseWriter, r *http.Request) {
	var b createBody
	if !a.decode(w, r, &b) {
		return
	}
	if strings.TrimSpace(b.TaskID) == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "task_id is required")
		return
	}
	if utf8.RuneCountInString(b.TaskID) > 512 {
		writeError(w, http.StatusBadRequest, "bad_request", "task_id is longer than 512 characters")
		return
	}
	var opts session.Options
	if b.Options != nil {
		opts = *b.Options
	}
	c, err := a.s.Create(r.Context(), session.CreateRequest{TaskID: b.TaskID, Dataset: b.Dataset, Split: b.Split, Options: opts})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	req := c.Session.State.Request
	tools := c.Tools
	if tools == nil {
		tools = []agent.Tool{}
	}
	writeJSON(w, http.StatusCreated, sessionBody{SessionID: c.Session.ID, RunID: req.RunID, EpisodeID: req.EpisodeID,
		Task: viewOf(req.Task), Messages: c.Messages, Tools: tools, Turn: 0, MaxTurns: req.Options.MaxTurns})
}

type statusBody struct {
	SessionID string                `json:"session_id"`
	RunID     string                `json:"run_id"`
	EpisodeID string                `json:"episode_id"`
	TaskID    string                `json:"task_id"`
	Turn      int                   `json:"turn"`
	Done      bool                  `json:"done"`
	Executing bool                  `json:"executing"`
	Outcome   string                `json:"outcome,omitempty"`
	Reward    *float64              `json:"reward,omitempty"`
	Messages  []schemas.ChatMessage `json:"messages"`
	Tags      map[string]string     `json:"tags,omitempty"`
	Row       *session.Row          `json:"row,omitempty"`
	CreatedAt string                `json:"created_at"`
	LastSeen  string                `json:"last_seen"`
}

const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	s, err := a.s.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, statusOf(s))
}

// statusOf is where a session stands (GET /v1/sessions/{id}).
func statusOf(s session.Session) statusBody {
	req := s.State.Request
	b := statusBody{SessionID: s.ID, RunID: req.RunID, EpisodeID: req.EpisodeID, TaskID: req.Task.ID, Turn: len(s.Steps),
		Done: s.Score != nil, Executing: s.Executing(), Messages: s.State.Messages, Tags: s.Tags,
		CreatedAt: s.CreatedAt.UTC().Format(timeFormat), LastSeen: s.LastSeen.UTC().Format(timeFormat)}
	if b.Messages == nil {
		b.Messages = []schemas.ChatMessage{}
	}
	if sc := s.Score; sc != nil {
		b.Outcome, b.Reward = string(sc.Outcome), &sc.Reward
		b.Row = &session.Row{RunID: sc.RunID, EpisodeID: sc.EpisodeID, Dataset: sc.Dataset, Store: sc.Store, VerifierVersion: sc.VerifierVersion}
	}
	return b
}

func (a *api) close(w http.ResponseWriter, r *http.Request) {
	// A body (none is expected) is read within the read timeout, before
	// the wait for the score.
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, a.opt.MaxBody)); err != nil {
		writeError(w, http.StatusBadRequest, "malformed_body", "the body could not be read within the server's limits")
		return
	}
	a.holdOpen(w)
	c, err := a.s.Close(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"session_id": c.Session.ID, "done": true, "outcome": c.Outcome, "reward": c.Reward, "row": c.Row})
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type stepBody struct {
	Turn           *int       `json:"turn"`
	Content        *string    `json:"content"`
	ToolCalls      []toolCall `json:"tool_calls"`
	Reasoning      string     `json:"reasoning"`
	FinishReason   string     `json:"finish_reason"`
	TokenIDs       []int32    `json:"token_ids"`
	PromptTokenIDs []int32    `json:"prompt_token_ids"`
	Logprobs       []float32  `json:"logprobs"`
	Usage          *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// reply is the step's reply text: content as is, or the first tool call
// re-serialised for the action parser.
func (b stepBody) reply() (string, error) {
	switch {
	case b.Content != nil && len(b.ToolCalls) > 0:
		return "", errors.New("give content or tool_calls, not both")
	case b.Content != nil:
		return *b.Content, nil
	case len(b.ToolCalls) == 0:
		return "", errors.New("content or tool_calls is required")
	}
	tc := b.ToolCalls[0]
	if tc.Function == nil {
		return "", errors.New("tool_calls[0]: function is required")
	}
	if tc.Type != "" && tc.Type != "function" {
		return "", fmt.Errorf("tool_calls[0]: type %q (want function)", tc.Type)
	}
	args := tc.Function.Arguments
	// OpenAI sends the arguments as a JSON text inside a string.
	var s string
	if err := json.Unmarshal(args, &s); err == nil {
		args = json.RawMessage(s)
	}
	if strings.TrimSpace(tc.Function.Name) == "" {
		return "", errors.New("tool_calls[0]: function.name is required")
	}
	text, err := agent.ToolCallReply(tc.Function.Name, args)
	if err != nil {
		// Arguments that are not a JSON object are the model's mistake, as
		// a malformed reply is: the action parser answers them (a format
		// error), they are not a bad request.
		raw, _ := json.Marshal(struct {
			Action string `json:"action"`
			Params string `json:"params"`
		}{tc.Function.Name, string(args)})
		return string(raw), nil
	}
	return text, nil
}

func (a *api) step(w http.ResponseWriter, r *http.Request) {
	var b stepBody
	if !a.decode(w, r, &b) {
		return
	}
	a.holdOpen(w)
	if b.Turn == nil || *b.Turn < 0 {
		writeError(w, http.StatusBadRequest, "bad_request", "turn is required: the step's index, 0 for the first reply")
		return
	}
	text, err := b.reply()
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	sr := session.StepRequest{Turn: *b.Turn, Content: text, Reasoning: b.Reasoning, FinishReason: b.FinishReason,
		TokenIDs: b.TokenIDs, PromptTokenIDs: b.PromptTokenIDs, Logprobs: b.Logprobs}
	if b.Usage != nil {
		if b.Usage.PromptTokens < 0 || b.Usage.CompletionTokens < 0 {
			writeError(w, http.StatusBadRequest, "bad_request", "usage: token counts must be ≥ 0")
			return
		}
		sr.PromptTokens, sr.CompletionTokens = b.Usage.PromptTokens, b.Usage.CompletionTokens
	}
	res, err := a.s.Step(r.Context(), r.PathValue("id"), sr)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
