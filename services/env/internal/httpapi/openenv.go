package httpapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/internal/session"
)

// OpenEnvPrefix is where the OpenEnv door is served: an OpenEnv client
// takes http://HOST:PORT/openenv as its base URL (it appends /ws).
const OpenEnvPrefix = "/openenv"

// OpenEnvDoc is the OpenEnv door's own OpenAPI document (its paths are
// relative to OpenEnvPrefix); its components hold the Action, Observation
// and State schemas /schema answers.
//
//go:embed openenv.json
var OpenEnvDoc []byte

// DefaultSocketIdle bounds how long a WebSocket may wait for its next
// message when Options.SocketIdle is not set.
const DefaultSocketIdle = 10 * time.Minute

// OpenEnv's WebSocket error codes (openenv.core.env_server.types.WSErrorCode).
const (
	oeInvalidJSON   = "INVALID_JSON"
	oeUnknownType   = "UNKNOWN_TYPE"
	oeValidation    = "VALIDATION_ERROR"
	oeExecution     = "EXECUTION_ERROR"
	oeCapacity      = "CAPACITY_REACHED"
	oeSessionError  = "SESSION_ERROR"
	oeMaxCloseWait  = 30 * time.Second
	oeWriteDeadline = 30 * time.Second
)

// oeReset is a reset's parameters (the WebSocket message's data, the HTTP
// body): a task to open a session of, or a session to resume.
type oeReset struct {
	TaskID    string           `json:"task_id"`
	Dataset   string           `json:"dataset"`
	Split     string           `json:"split"`
	Options   *session.Options `json:"options"`
	Seed      *int64           `json:"seed"`
	SessionID string           `json:"session_id"`
	// EpisodeID is OpenEnv's custom episode id: over a WebSocket, the
	// connection's name for the episode (its state answers it; medgym's own
	// id is medgym_episode_id); over HTTP, which has no connection to hold
	// it, refused (not ignored).
	EpisodeID *string `json:"episode_id"`
}

// oeAction is the door's Action: a model reply as /v1's step takes it
// (content or tool_calls, an optional turn, the token record) and OpenEnv's
// metadata (ignored).
type oeAction struct {
	stepBody
	Metadata map[string]any `json:"metadata"`
}

// oeObs is an observation on the wire (openenv serialize_observation):
// the observation's fields, reward and done beside it.
type oeObs struct {
	Observation oeObsFields `json:"observation"`
	Reward      *float64    `json:"reward"`
	Done        bool        `json:"done"`
}

type oeObsFields struct {
	// Text is what the model reads next: the environment's answer to the
	// last reply (empty at reset: Messages hold the opening).
	Text      string                `json:"text"`
	SessionID string                `json:"session_id"`
	Turn      int                   `json:"turn"` // the next step's turn
	MaxTurns  int                   `json:"max_turns,omitempty"`
	Truncated bool                  `json:"truncated"`
	Messages  []schemas.ChatMessage `json:"messages,omitempty"`
	Tools     []agent.Tool          `json:"tools,omitempty"`
	Task      *taskView             `json:"task,omitempty"`
	Info      *session.StepInfo     `json:"info,omitempty"`
	// ReplyIgnored: a step retried with another reply (the turn's first
	// reply stands; this is its answer).
	ReplyIgnored bool           `json:"reply_ignored,omitempty"`
	Metadata     map[string]any `json:"metadata"`
}

// oeState is the door's State: where the session stands, as GET
// /v1/sessions/{id} says (its episode_id is OpenEnv's), and OpenEnv's
// step_count.
type oeState struct {
	StepCount int `json:"step_count"`
	// EpisodeID is the reset's episode_id where the connection's reset
	// named one, else medgym's (statusBody's, which this shadows).
	EpisodeID string `json:"episode_id"`
	// MedgymEpisodeID is medgym's episode id when EpisodeID is the client's.
	MedgymEpisodeID string `json:"medgym_episode_id,omitempty"`
	statusBody
}

// maxEpisodeLabel bounds a client's episode_id (as OpenEnv's validator).
const maxEpisodeLabel = 128

// oeConn is where one OpenEnv client stands: its session and next turn.
type oeConn struct {
	id   string
	next int
	done bool
	// label is the episode_id the reset named (empty: none).
	label string
}

// openenvRoutes serves the door under p (OpenEnvPrefix, or "" for the
// root).
func (a *api) openenvRoutes(mux *http.ServeMux, p string) {
	mux.HandleFunc(p+"/health", a.methods(map[string]http.HandlerFunc{http.MethodGet: func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "healthy"})
	}}))
	// The door's documents are open, as /openapi.json is: they hold no
	// session and no task (OpenEnv's validator sends no token).
	mux.HandleFunc(p+"/openapi.json", a.methods(map[string]http.HandlerFunc{http.MethodGet: func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(OpenEnvDoc)
	}}))
	mux.HandleFunc(p+"/metadata", a.methods(map[string]http.HandlerFunc{http.MethodGet: a.oeMetadata}))
	mux.HandleFunc(p+"/schema", a.methods(map[string]http.HandlerFunc{http.MethodGet: a.oeSchema}))
	mux.HandleFunc(p+"/reset", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodPost: a.oeHTTPReset})))
	mux.HandleFunc(p+"/step", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodPost: a.oeHTTPStep})))
	mux.HandleFunc(p+"/state", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodGet: a.oeHTTPState})))
	mux.HandleFunc(p+"/ws", a.auth(a.methods(map[string]http.HandlerFunc{http.MethodGet: a.oeSocket})))
	mux.Handle(p+"/mcp", a.authHandler(jsonRPCEnvelope(a.opt.MaxBody, a.mcp)))
}

func (a *api) oeMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"name": "medgym",
		"description": "Biomedical data-science tasks: an agent runs code in a sandbox, asks for information and " +
			"answers; the verifier scores the answer. reset takes task_id (GET /v1/tasks lists them); step takes " +
			"the model's reply (content or tool_calls); reward is the verifier's at done.",
		"version":           "1",
		"documentation_url": "https://github.com/medgym/medgym/blob/main/services/env/README.md",
	})
}

func (a *api) oeSchema(w http.ResponseWriter, _ *http.Request) {
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenEnvDoc, &doc); err != nil {
		a.opt.Log.Error("openenv document", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
		return
	}
	s := doc.Components.Schemas
	writeJSON(w, http.StatusOK, map[string]json.RawMessage{"action": s["Action"], "observation": s["Observation"],
		"reset_observation": s["Observation"], "state": s["State"]})
}

// oeOpen opens the session a reset asks for, or finds the one it resumes.
func (a *api) oeOpen(ctx context.Context, b oeReset) (oeObs, oeConn, error) {
	var label string
	if b.EpisodeID != nil {
		label = *b.EpisodeID
		if label == "" || utf8.RuneCountInString(label) > maxEpisodeLabel || strings.ContainsFunc(label, unicode.IsControl) {
			return oeObs{}, oeConn{}, fmt.Errorf("%w: episode_id: 1 to %d characters, no control characters", session.ErrInvalid, maxEpisodeLabel)
		}
	}
	o, c, err := a.oeOpenSession(ctx, b)
	if err != nil || label == "" {
		return o, c, err
	}
	c.label = label
	o.Observation.Metadata["medgym_episode_id"] = o.Observation.Metadata["episode_id"]
	o.Observation.Metadata["episode_id"] = label
	return o, c, nil
}

// oeOpenSession opens the session b names a task of, or finds the one it
// resumes.
func (a *api) oeOpenSession(ctx context.Context, b oeReset) (oeObs, oeConn, error) {
	if b.SessionID != "" {
		if b.TaskID != "" || b.Options != nil || b.Seed != nil {
			return oeObs{}, oeConn{}, fmt.Errorf("%w: give session_id (resume) or task_id (a new session), not both", session.ErrInvalid)
		}
		s, err := a.s.Get(ctx, b.SessionID)
		if err != nil {
			return oeObs{}, oeConn{}, err
		}
		return resumed(s), oeConn{id: s.ID, next: len(s.Steps), done: s.Score != nil}, nil
	}
	if strings.TrimSpace(b.TaskID) == "" {
		return oeObs{}, oeConn{}, fmt.Errorf("%w: task_id is required (GET /v1/tasks lists them), or session_id to resume a session", session.ErrInvalid)
	}
	if utf8.RuneCountInString(b.TaskID) > 512 || utf8.RuneCountInString(b.Dataset) > maxFilter || utf8.RuneCountInString(b.Split) > maxFilter {
		return oeObs{}, oeConn{}, fmt.Errorf("%w: task_id (512), dataset or split (%d characters) is too long", session.ErrInvalid, maxFilter)
	}
	var opts session.Options
	if b.Options != nil {
		opts = *b.Options
	}
	if b.Seed != nil {
		if opts.Seed != nil && *opts.Seed != *b.Seed {
			return oeObs{}, oeConn{}, fmt.Errorf("%w: seed and options.seed differ", session.ErrInvalid)
		}
		opts.Seed = b.Seed
	}
	c, err := a.s.Create(ctx, session.CreateRequest{TaskID: b.TaskID, Dataset: b.Dataset, Split: b.Split, Options: opts})
	if err != nil {
		return oeObs{}, oeConn{}, err
	}
	req := c.Session.State.Request
	tv := viewOf(req.Task)
	tools := c.Tools
	if tools == nil {
		tools = []agent.Tool{}
	}
	return oeObs{Observation: oeObsFields{SessionID: c.Session.ID, MaxTurns: req.Options.MaxTurns, Messages: c.Messages,
		Tools: tools, Task: &tv, Metadata: map[string]any{"run_id": req.RunID, "episode_id": req.EpisodeID}}}, oeConn{id: c.Session.ID}, nil
}

// resumed is the observation of a session a client comes back to: the
// conversation so far, and the last answer.
func resumed(s session.Session) oeObs {
	req := s.State.Request
	o := oeObs{Observation: oeObsFields{SessionID: s.ID, Turn: len(s.Steps), MaxTurns: req.Options.MaxTurns,
		Messages: s.State.Messages, Metadata: map[string]any{"run_id": req.RunID, "episode_id": req.EpisodeID}}}
	if n := len(s.Steps); n > 0 {
		last := s.Steps[n-1]
		o.Observation.Text, o.Observation.Truncated, o.Observation.Info = last.Observation, last.Truncated, &last.Info
	}
	if sc := s.Score; sc != nil {
		o.Done, o.Reward = true, &sc.Reward
	}
	return o
}

// oeStep plays one action on c's session: the action's turn, else the
// connection's next.
func (a *api) oeStep(ctx context.Context, c *oeConn, act oeAction) (oeObs, error) {
	turn := c.next
	if act.Turn != nil {
		if *act.Turn < 0 {
			return oeObs{}, fmt.Errorf("%w: turn must be ≥ 0", session.ErrInvalid)
		}
		turn = *act.Turn
	}
	sr, err := act.request(turn)
	if err != nil {
		return oeObs{}, fmt.Errorf("%w: %s", session.ErrInvalid, err.Error())
	}
	res, err := a.s.Step(ctx, c.id, sr)
	if err != nil {
		return oeObs{}, err
	}
	c.next = max(c.next, res.Info.Turn+1)
	c.done = c.done || res.Done
	info := res.Info
	o := oeObs{Observation: oeObsFields{Text: res.Observation, SessionID: c.id, Turn: c.next, Truncated: res.Truncated,
		Info: &info, ReplyIgnored: res.ReplyIgnored, Metadata: map[string]any{}}, Done: res.Done}
	r := res.Reward
	o.Reward = &r
	return o, nil
}

// request is the step request of a reply at turn (as /v1's step builds it).
func (b stepBody) request(turn int) (session.StepRequest, error) {
	text, err := b.reply()
	if err != nil {
		return session.StepRequest{}, err
	}
	sr := session.StepRequest{Turn: turn, Content: text, Reasoning: b.Reasoning, FinishReason: b.FinishReason,
		TokenIDs: b.TokenIDs, PromptTokenIDs: b.PromptTokenIDs, Logprobs: b.Logprobs}
	if b.Usage != nil {
		if b.Usage.PromptTokens < 0 || b.Usage.CompletionTokens < 0 {
			return session.StepRequest{}, errors.New("usage: token counts must be ≥ 0")
		}
		sr.PromptTokens, sr.CompletionTokens = b.Usage.PromptTokens, b.Usage.CompletionTokens
	}
	return sr, nil
}

// oeState is where c's session stands, under the episode_id c's reset
// named, if any.
func (a *api) oeState(ctx context.Context, c oeConn) (oeState, error) {
	s, err := a.s.Get(ctx, c.id)
	if err != nil {
		return oeState{}, err
	}
	st := oeState{StepCount: len(s.Steps), statusBody: statusOf(s)}
	st.EpisodeID = st.statusBody.EpisodeID
	if c.label != "" {
		st.EpisodeID, st.MedgymEpisodeID = c.label, st.statusBody.EpisodeID
	}
	return st, nil
}

// --- HTTP: stateless requests naming their session ---

func (a *api) oeHTTPReset(w http.ResponseWriter, r *http.Request) {
	var b oeReset
	if r.ContentLength != 0 && !a.decode(w, r, &b) {
		return
	}
	if b.EpisodeID != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "episode_id: over HTTP medgym names its episodes (the state's episode_id); "+
			"a WebSocket reset may name its own, which that connection's state answers")
		return
	}
	o, _, err := a.oeOpen(r.Context(), b)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// oeHTTPStepBody is OpenEnv's StepRequest with the session it steps.
type oeHTTPStepBody struct {
	Action    *oeAction `json:"action"`
	SessionID string    `json:"session_id"`
	Turn      *int      `json:"turn"`
	TimeoutS  *float64  `json:"timeout_s"`
	RequestID string    `json:"request_id"`
}

func (a *api) oeHTTPStep(w http.ResponseWriter, r *http.Request) {
	var b oeHTTPStepBody
	if !a.decode(w, r, &b) {
		return
	}
	a.holdOpen(w)
	switch {
	case b.Action == nil:
		writeError(w, http.StatusBadRequest, "bad_request", "action is required")
		return
	case b.SessionID == "":
		writeError(w, http.StatusBadRequest, "bad_request", "session_id is required: the session_id of the reset's observation")
		return
	case b.Turn == nil && b.Action.Turn == nil:
		writeError(w, http.StatusBadRequest, "bad_request", "turn is required (here or in the action): the step's index, 0 for the first reply")
		return
	}
	if b.Turn != nil {
		if b.Action.Turn != nil && *b.Action.Turn != *b.Turn {
			writeError(w, http.StatusBadRequest, "bad_request", "turn and action.turn differ")
			return
		}
		b.Action.Turn = b.Turn
	}
	c := oeConn{id: b.SessionID}
	o, err := a.oeStep(r.Context(), &c, *b.Action)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func (a *api) oeHTTPState(w http.ResponseWriter, r *http.Request) {
	if err := unknownParam(r, "session_id"); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	id := r.URL.Query().Get("session_id")
	if id == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "query parameter session_id is required (over the WebSocket, state needs none)")
		return
	}
	st, err := a.oeState(r.Context(), oeConn{id: id})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// --- WebSocket: OpenEnv's session protocol ---

type oeMessage struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

type oeReply struct {
	Type string `json:"type"`
	Data any    `json:"data"`
}

// oeSocket serves one OpenEnv client: reset, step, state and close
// messages over one WebSocket, one session at a time. The connection is
// bounded like a request: a message by MaxBody, the wait for the next one
// by SocketIdle, a reply's write by oeWriteDeadline; the server's
// connection cap counts it until it closes.
func (a *api) oeSocket(w http.ResponseWriter, r *http.Request) {
	if err := unknownParam(r, "session_id"); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	resume := r.URL.Query().Get("session_id")
	// The server's read and write deadlines bound a request; a socket has
	// its own (below).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return // Accept wrote the refusal
	}
	defer ws.CloseNow()
	ws.SetReadLimit(a.opt.MaxBody)
	ctx := r.Context()
	var cur *oeConn
	if resume != "" {
		_, c, err := a.oeOpen(ctx, oeReset{SessionID: resume})
		if err != nil {
			a.oeSend(ctx, ws, a.oeError(r, err))
			_ = ws.Close(websocket.StatusPolicyViolation, "the session to resume could not be opened")
			return
		}
		cur = &c
	}
	// The reader keeps reading while a message is handled, so the client's
	// pings are answered during a long step (OpenEnv's client gives up on a
	// socket whose pings go unanswered for 20 s). The idle clock runs only
	// while the server waits for the client: an idle socket is closed with
	// a reason (a cancelled Read would drop it without one).
	idle := time.AfterFunc(a.opt.SocketIdle, func() {
		_ = ws.Close(websocket.StatusPolicyViolation, "idle: no message within the server's limit")
	})
	defer idle.Stop()
	type frame struct {
		typ  websocket.MessageType
		data []byte
	}
	frames := make(chan frame)
	go func() {
		defer close(frames)
		for {
			typ, data, err := ws.Read(ctx)
			if err != nil {
				return // the client left, idled, or sent a frame over the limit (closed 1009 by Read)
			}
			select {
			case frames <- frame{typ, data}:
			case <-ctx.Done():
				return
			}
		}
	}()
	for f := range frames {
		idle.Stop()
		reply := oeErr(oeInvalidJSON, "send text frames holding one JSON object")
		if f.typ == websocket.MessageText {
			var closing bool
			reply, closing = a.oeHandle(r, cur, f.data, func(c *oeConn) { cur = c })
			if closing {
				_ = ws.Close(websocket.StatusNormalClosure, "")
				return
			}
		}
		if !a.oeSend(ctx, ws, reply) {
			return
		}
		idle.Reset(a.opt.SocketIdle)
	}
}

// oeHandle answers one message; set replaces the connection's session.
// closing reports a close message (the session, unfinished, is ended).
func (a *api) oeHandle(r *http.Request, cur *oeConn, data []byte, set func(*oeConn)) (reply oeReply, closing bool) {
	ctx := r.Context()
	var m oeMessage
	if err := decodeStrict(data, &m); err != nil {
		return oeErr(oeInvalidJSON, err.Error()), false
	}
	switch m.Type {
	case "reset":
		var b oeReset
		if len(m.Data) > 0 && string(m.Data) != "null" {
			if err := decodeStrict(m.Data, &b); err != nil {
				return oeErr(oeValidation, "data: "+err.Error()), false
			}
		}
		// One session a connection: an unfinished one is ended first.
		if cur != nil && !cur.done && cur.id != b.SessionID {
			if err := a.oeEnd(ctx, cur); err != nil {
				return a.oeError(r, err), false
			}
		}
		o, c, err := a.oeOpen(ctx, b)
		if err != nil {
			set(nil)
			return a.oeError(r, err), false
		}
		set(&c)
		return oeReply{Type: "observation", Data: o}, false
	case "step":
		if cur == nil {
			return oeErr(oeSessionError, "no session on this connection: send reset first (task_id, or session_id to resume)"), false
		}
		var act oeAction
		if err := decodeStrict(m.Data, &act); err != nil {
			return oeErr(oeValidation, "data: "+err.Error()), false
		}
		o, err := a.oeStep(ctx, cur, act)
		if err != nil {
			return a.oeError(r, err), false
		}
		return oeReply{Type: "observation", Data: o}, false
	case "state":
		if cur == nil {
			return oeErr(oeSessionError, "no session on this connection: send reset first"), false
		}
		st, err := a.oeState(ctx, *cur)
		if err != nil {
			return a.oeError(r, err), false
		}
		return oeReply{Type: "state", Data: st}, false
	case "close":
		if cur != nil && !cur.done {
			if err := a.oeEnd(ctx, cur); err != nil {
				a.opt.Log.Warn("openenv: close a session", "session", cur.id, "err", err)
			}
		}
		return oeReply{}, true
	}
	return oeErr(oeUnknownType, fmt.Sprintf("unknown message type %.40q (reset, step, state, close)", m.Type)), false
}

// oeEnd ends c's unfinished session as DELETE /v1/sessions/{id} does
// (termination closed), waiting for its score within oeMaxCloseWait.
func (a *api) oeEnd(ctx context.Context, c *oeConn) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), oeMaxCloseWait)
	defer cancel()
	if _, err := a.s.Close(ctx, c.id); err != nil && !errors.Is(err, session.ErrUnknownSession) {
		return err
	}
	c.done = true
	return nil
}

func oeErr(code, msg string) oeReply {
	return oeReply{Type: "error", Data: map[string]string{"code": code, "message": msg}}
}

// oeError is a domain error as an OpenEnv error message; medgym's own code
// rides beside OpenEnv's.
func (a *api) oeError(r *http.Request, err error) oeReply {
	e := a.classify(r.Context(), "openenv socket", err)
	code := oeExecution
	switch {
	case e.code == "too_many_sessions":
		code = oeCapacity
	case e.status == http.StatusBadRequest:
		code = oeValidation
	case e.status == http.StatusNotFound || e.status == http.StatusConflict:
		code = oeSessionError
	}
	return oeReply{Type: "error", Data: map[string]string{"code": code, "message": e.msg, "medgym_code": e.code}}
}

// oeSend writes one reply; false when the socket is gone.
func (a *api) oeSend(ctx context.Context, ws *websocket.Conn, v oeReply) bool {
	b, err := json.Marshal(v)
	if err != nil {
		a.opt.Log.Error("openenv: encode reply", "err", err)
		b = []byte(`{"type":"error","data":{"code":"EXECUTION_ERROR","message":"internal error"}}`)
	}
	wctx, cancel := context.WithTimeout(ctx, oeWriteDeadline)
	defer cancel()
	return ws.Write(wctx, websocket.MessageText, b) == nil
}
