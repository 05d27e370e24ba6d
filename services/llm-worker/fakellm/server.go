package fakellm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/medgym/medgym/schemas"
)

// Fingerprint is every response's system_fingerprint.
const Fingerprint = "medgym-fake-llm"

// DefaultModel is the base model served when Config.Model is empty.
const DefaultModel = "medgym-fake"

// Policies.
const (
	PolicyScript    = "script"
	PolicyReference = "reference"
	PolicyGarbage   = "garbage"
	PolicyMixed     = "mixed"
	PolicyAlternate = "alternate"
)

// Config configures a Server.
type Config struct {
	// Policy is PolicyScript, PolicyReference, PolicyGarbage, PolicyMixed or
	// PolicyAlternate (empty: script).
	Policy string
	// Script holds the replies of a conversation, in order.
	Script []string
	// PCorrect is the chance a reference reply is the correct solution.
	PCorrect float64
	// GarbageRate is the chance a wrong reference reply is unparseable text
	// instead of a wrong program.
	GarbageRate float64
	// LatencyMean ± LatencyJitter (uniform) delays each reply.
	LatencyMean, LatencyJitter time.Duration
	// Fault rates, each in [0, 1], decided per request: a 429 with
	// Retry-After, a 500, a request that hangs until the client hangs up,
	// and a 200 with a malformed JSON body.
	ErrorRate429, ErrorRate500, TimeoutRate, MalformedRate float64
	// Seed makes replies and faults reproducible.
	Seed int64
	// References looks up a task's reference solution by the text of the
	// first user message (with a vLLM-style prompt that text also holds the
	// system prompt).
	References func(goal string) (code string, ok bool)
	// Model is the base model name (empty: DefaultModel).
	Model string
}

// Stats counts chat-completion requests.
type Stats struct {
	Requests int
	// ByStatus counts answers per HTTP status; 0 counts hung requests.
	ByStatus map[int]int
	// ByModel counts requests per requested model name.
	ByModel map[string]int
}

// Server is the fake; it is an http.Handler.
type Server struct {
	cfg Config
	mux *http.ServeMux

	mu       sync.Mutex
	adapters map[string]string // LoRA name → path
	loads    []string          // LoRA names, in load order
	seen     map[uint64]int    // conversation hash → requests so far
	stats    Stats
}

// New returns a server for cfg.
func New(cfg Config) *Server {
	if cfg.Policy == "" {
		cfg.Policy = PolicyScript
	}
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	s := &Server{
		cfg:      cfg,
		mux:      http.NewServeMux(),
		adapters: map[string]string{},
		seen:     map[uint64]int{},
		stats:    Stats{ByStatus: map[int]int{}, ByModel: map[string]int{}},
	}
	s.mux.HandleFunc("POST /v1/chat/completions", s.chat)
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.HandleFunc("POST /v1/load_lora_adapter", s.loadLoRA)
	s.mux.HandleFunc("POST /v1/unload_lora_adapter", s.unloadLoRA)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Requests: s.stats.Requests, ByStatus: maps.Clone(s.stats.ByStatus), ByModel: maps.Clone(s.stats.ByModel)}
}

// Loads returns the names of the LoRA adapters loaded so far, in load order
// (an in-place reload appears again).
func (s *Server) Loads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.loads)
}

// Adapter returns the path a loaded LoRA adapter was loaded from.
func (s *Server) Adapter(name string) (path string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	path, ok = s.adapters[name]
	return path, ok
}

// chatRequest is what the fake reads of a request.
type chatRequest struct {
	Model               string                `json:"model"`
	Messages            []schemas.ChatMessage `json:"messages"`
	MaxTokens           int                   `json:"max_tokens"`
	MaxCompletionTokens int                   `json:"max_completion_tokens"`
	Logprobs            bool                  `json:"logprobs"`
	ReturnTokenIDs      bool                  `json:"return_token_ids"`
	Stream              bool                  `json:"stream"`
	Seed                *int64                `json:"seed"`
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		s.count(req.Model, http.StatusBadRequest)
		writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("invalid JSON body: %v", err))
		return
	}
	// Drain the body: only then does net/http cancel r.Context() when the
	// client hangs up, which ends injected hangs.
	io.Copy(io.Discard, r.Body)
	switch {
	case len(req.Messages) == 0:
		s.count(req.Model, http.StatusBadRequest)
		writeError(w, http.StatusBadRequest, "BadRequestError", "messages must not be empty")
		return
	case req.Stream:
		s.count(req.Model, http.StatusBadRequest)
		writeError(w, http.StatusBadRequest, "BadRequestError", "the fake does not stream")
		return
	case !s.serves(req.Model):
		s.count(req.Model, http.StatusNotFound)
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}

	conv := conversationHash(req.Messages)
	s.mu.Lock()
	attempt := s.seen[conv]
	s.seen[conv]++
	s.mu.Unlock()

	fault := rand.New(rand.NewPCG(uint64(s.cfg.Seed), conv^uint64(attempt+1)*0x9e3779b97f4a7c15))
	// A request seed picks another sample, as it does in vLLM; the same
	// seed gives the same reply.
	sample := conv
	if req.Seed != nil {
		sample ^= uint64(*req.Seed)*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	}
	rng := rand.New(rand.NewPCG(uint64(s.cfg.Seed)^0x5bd1e995, sample))

	if d := s.latency(fault); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			s.count(req.Model, 0)
			return
		}
	}
	switch u, c := fault.Float64(), s.cfg; {
	case u < c.ErrorRate429:
		s.count(req.Model, http.StatusTooManyRequests)
		w.Header().Set("Retry-After", "1")
		w.Header().Set("retry-after-ms", "20")
		writeError(w, http.StatusTooManyRequests, "RateLimitError", "rate limited by the fake (injected)")
		return
	case u < c.ErrorRate429+c.ErrorRate500:
		s.count(req.Model, http.StatusInternalServerError)
		writeError(w, http.StatusInternalServerError, "InternalServerError", "internal error in the fake (injected)")
		return
	case u < c.ErrorRate429+c.ErrorRate500+c.TimeoutRate:
		s.count(req.Model, 0)
		<-r.Context().Done()
		return
	case u < c.ErrorRate429+c.ErrorRate500+c.TimeoutRate+c.MalformedRate:
		s.count(req.Model, http.StatusOK)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-fake","object":"chat.completion","choices":[{"index":0,"message":{"role":"assist`)
		return
	}

	text := s.reply(req.Messages, req.Seed, rng)
	s.count(req.Model, http.StatusOK)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.response(req, text, conv, attempt, rng))
}

func (s *Server) latency(rng *rand.Rand) time.Duration {
	d := s.cfg.LatencyMean
	if j := s.cfg.LatencyJitter; j > 0 {
		d += time.Duration((2*rng.Float64() - 1) * float64(j))
	}
	return max(d, 0)
}

// response builds the chat.completion body for text.
func (s *Server) response(req chatRequest, text string, conv uint64, attempt int, rng *rand.Rand) map[string]any {
	pieces := Tokenize(text)
	limit := req.MaxCompletionTokens
	if limit == 0 {
		limit = req.MaxTokens
	}
	finish := "stop"
	ids := CompletionTokenIDs(text)
	if limit > 0 && len(ids) > limit {
		pieces, finish = pieces[:limit], "length"
		text = strings.Join(pieces, "")
		ids = ids[:limit]
	}
	choice := map[string]any{
		"index":         0,
		"message":       map[string]any{"role": "assistant", "content": text},
		"finish_reason": finish,
		"logprobs":      nil,
	}
	if req.Logprobs {
		content := make([]map[string]any, len(ids))
		for i, id := range ids {
			var b []int
			if i < len(pieces) {
				for _, c := range []byte(pieces[i]) {
					b = append(b, int(c))
				}
			}
			content[i] = map[string]any{
				"token":        fmt.Sprintf("token_id:%d", id),
				"logprob":      float64(float32(-2 * rng.Float64())),
				"bytes":        b,
				"top_logprobs": []any{},
			}
		}
		choice["logprobs"] = map[string]any{"content": content}
	}
	prompt := PromptTokenIDs(req.Messages)
	body := map[string]any{
		"id":                 fmt.Sprintf("chatcmpl-fake-%016x-%d", conv, attempt),
		"object":             "chat.completion",
		"created":            time.Now().Unix(),
		"model":              req.Model,
		"system_fingerprint": Fingerprint,
		"choices":            []any{choice},
		"usage": map[string]int{
			"prompt_tokens":     len(prompt),
			"completion_tokens": len(ids),
			"total_tokens":      len(prompt) + len(ids),
		},
	}
	if req.ReturnTokenIDs {
		choice["token_ids"] = ids
		body["prompt_token_ids"] = prompt
	}
	return body
}

// reply is the policy's text for a conversation.
func (s *Server) reply(msgs []schemas.ChatMessage, seed *int64, rng *rand.Rand) string {
	turn := 0
	goal := ""
	for _, m := range msgs {
		switch {
		case m.Role == "assistant":
			turn++
		case m.Role == "user" && goal == "":
			goal = m.Content
		}
	}
	switch s.cfg.Policy {
	case PolicyReference:
		return s.reference(goal, rng)
	case PolicyGarbage:
		return garbage(rng)
	case PolicyMixed:
		switch u := rng.Float64(); {
		case u < 0.2:
			return action(schemas.ActionValidateCode, "code", "import os\nfor root, dirs, files in os.walk('/data'):\n    print(root, files)")
		case u < 0.4:
			return garbage(rng)
		}
		return s.reference(goal, rng)
	case PolicyAlternate:
		return s.alternate(goal, turn, seed)
	default:
		if len(s.cfg.Script) == 0 {
			return ""
		}
		return s.cfg.Script[min(turn, len(s.cfg.Script)-1)]
	}
}

func (s *Server) reference(goal string, rng *rand.Rand) string {
	if rng.Float64() < s.cfg.PCorrect && s.cfg.References != nil {
		if code, ok := s.cfg.References(goal); ok {
			return action(schemas.ActionValidateCode, "code", code)
		}
	}
	if rng.Float64() < s.cfg.GarbageRate {
		return garbage(rng)
	}
	wrong := fmt.Sprintf("answer = %d.%03d\nprint(answer)", 900000+rng.IntN(99999), rng.IntN(1000))
	return action(schemas.ActionValidateCode, "code", wrong)
}

// wrongAnswer is the alternate policy's wrong program.
const wrongAnswer = "answer = -987654.321\nprint(answer)"

// alternate is the reply of the alternate policy: by the request seed k
// (0 when absent), the first turn is the reference for an even k and a
// crashing program for an odd one; a later turn is the reference when k/2 is
// even and a wrong number when it is odd.
func (s *Server) alternate(goal string, turn int, seed *int64) string {
	var k int64
	if seed != nil {
		k = *seed
	}
	if turn == 0 && k%2 != 0 {
		return action(schemas.ActionValidateCode, "code", "x = 1/0\nprint(x)")
	}
	if turn > 0 && (k/2)%2 != 0 {
		return action(schemas.ActionValidateCode, "code", wrongAnswer)
	}
	if s.cfg.References != nil {
		if code, ok := s.cfg.References(goal); ok {
			return action(schemas.ActionValidateCode, "code", code)
		}
	}
	return action(schemas.ActionValidateCode, "code", wrongAnswer)
}

var garbageTexts = []string{
	"I think the answer is probably 42, based on the patient's history.",
	`{"action": "validate_code", "params": {"code": "import pandas as pd\ndf = pd.read_csv('/data/`,
	`{"action": "submit", "params": {"answer": "42"}}`,
	"<think>Let me look at the tables first. The admissions table has {subject_id, hadm_id}",
	"```python\nanswer = 42\nprint(answer)\n```",
	`{'action': 'validate_code', 'params': {'code': 'print(1)'}}`,
}

func garbage(rng *rand.Rand) string { return garbageTexts[rng.IntN(len(garbageTexts))] }

func action(name, key, value string) string {
	b, _ := json.Marshal(map[string]any{"action": name, "params": map[string]string{key: value}})
	return string(b)
}

// conversationHash identifies a conversation by its messages.
func conversationHash(msgs []schemas.ChatMessage) uint64 {
	h := fnv.New64a()
	var n [8]byte
	for _, m := range msgs {
		for _, s := range []string{m.Role, m.Content} {
			binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			io.WriteString(h, s)
		}
	}
	return h.Sum64()
}

func (s *Server) serves(model string) bool {
	if model == s.cfg.Model {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.adapters[model]
	return ok
}

func (s *Server) count(model string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Requests++
	s.stats.ByStatus[status]++
	s.stats.ByModel[model]++
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	now := time.Now().Unix()
	data := []map[string]any{{"id": s.cfg.Model, "object": "model", "created": now, "owned_by": "medgym", "root": s.cfg.Model, "parent": nil}}
	s.mu.Lock()
	names := make([]string, 0, len(s.adapters))
	for name := range s.adapters {
		names = append(names, name)
	}
	s.mu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		data = append(data, map[string]any{"id": name, "object": "model", "created": now, "owned_by": "medgym", "root": name, "parent": s.cfg.Model})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

type loraRequest struct {
	Name        string `json:"lora_name"`
	Path        string `json:"lora_path"`
	LoadInplace bool   `json:"load_inplace"`
}

func (s *Server) loadLoRA(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" || req.Path == "" {
		writeError(w, http.StatusBadRequest, "BadRequestError", "both 'lora_name' and 'lora_path' must be provided")
		return
	}
	s.mu.Lock()
	_, exists := s.adapters[req.Name]
	if !exists || req.LoadInplace {
		s.adapters[req.Name] = req.Path
		s.loads = append(s.loads, req.Name)
	}
	s.mu.Unlock()
	if exists && !req.LoadInplace {
		writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.Name))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
}

func (s *Server) unloadLoRA(w http.ResponseWriter, r *http.Request) {
	var req loraRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" {
		writeError(w, http.StatusBadRequest, "BadRequestError", "'lora_name' must be provided")
		return
	}
	s.mu.Lock()
	_, ok := s.adapters[req.Name]
	delete(s.adapters, req.Name)
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", req.Name))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.Name)
}

// writeError answers in the OpenAI/vLLM error shape.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
}
