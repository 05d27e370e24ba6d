package testenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/medgym/medgym/tasks"
)

// FakeModel is an OpenAI-compatible chat server playing MedCalc tasks.
// Per task it counts first turns: even ones answer with the reference
// solution, odd ones with a crashing program; a second turn after a crash
// alternates between the reference and a wrong number. So K = 4 samples of
// one task give 3 successes (one after a failed attempt) and 1 failure.
//
// It serves the base model and every adapter loaded through
// POST /v1/load_lora_adapter {"lora_name", "lora_path"} (vLLM's API); a
// request naming any other model gets 404, as vLLM answers.
type FakeModel struct {
	Base  string
	tasks []tasks.Task

	mu       sync.Mutex
	adapters map[string]string // name → path
	loads    []string          // lora names, in load order
	counts   map[string]int    // task id/turn → requests
	models   map[string]int    // model name → requests
}

// NewFakeModel returns a server for base that knows the given tasks.
func NewFakeModel(base string, ts []tasks.Task) *FakeModel {
	return &FakeModel{Base: base, tasks: ts, adapters: map[string]string{}, counts: map[string]int{}, models: map[string]int{}}
}

// Loads returns the adapter names loaded so far, in order.
func (m *FakeModel) Loads() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.loads)
}

// Requests returns how many chat requests named model.
func (m *FakeModel) Requests(model string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.models[model]
}

// AdapterPath returns the path an adapter was loaded from.
func (m *FakeModel) AdapterPath(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.adapters[name]
}

func (m *FakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		m.mu.Lock()
		data := []map[string]string{{"id": m.Base, "object": "model"}}
		for n := range m.adapters {
			data = append(data, map[string]string{"id": n, "object": "model", "parent": m.Base})
		}
		m.mu.Unlock()
		writeJSON(w, 200, map[string]any{"object": "list", "data": data})
	case "/v1/load_lora_adapter":
		var req struct {
			Name string `json:"lora_name"`
			Path string `json:"lora_path"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" || req.Path == "" {
			writeJSON(w, 400, apiError("lora_name and lora_path are required"))
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.adapters[req.Name]; ok {
			writeJSON(w, 400, apiError(fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.Name)))
			return
		}
		m.adapters[req.Name] = req.Path
		m.loads = append(m.loads, req.Name)
		w.WriteHeader(200)
		fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
	case "/v1/chat/completions":
		m.chat(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (m *FakeModel) chat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		Logprobs       bool `json:"logprobs"`
		ReturnTokenIDs bool `json:"return_token_ids"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, apiError("bad request: "+err.Error()))
		return
	}
	m.mu.Lock()
	_, isAdapter := m.adapters[req.Model]
	if req.Model != m.Base && !isAdapter {
		m.mu.Unlock()
		writeJSON(w, 404, apiError(fmt.Sprintf("The model `%s` does not exist.", req.Model)))
		return
	}
	m.models[req.Model]++
	var goal string
	turn := 0
	for _, msg := range req.Messages {
		switch {
		case msg.Role == "assistant":
			turn++
		case msg.Role == "user" && goal == "":
			goal = msg.Content
		}
	}
	task := m.find(goal)
	var text string
	if task == nil {
		text = `{"action": "answer", "params": {"answer": "unknown"}}`
	} else {
		key := fmt.Sprintf("%s/%d", task.View.ID, min(turn, 1))
		n := m.counts[key]
		m.counts[key]++
		code := task.Reference
		switch {
		case turn == 0 && n%2 == 1:
			code = "x = 1/0\nprint(x)"
		case turn > 0 && n%2 == 1:
			code = "print(-987654.321)"
		}
		b, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": code}})
		text = string(b)
	}
	m.mu.Unlock()

	choice := map[string]any{"index": 0, "finish_reason": "stop",
		"message": map[string]any{"role": "assistant", "content": text}}
	ids := make([]int32, 0, len(text))
	for i := 0; i < len(text); i++ {
		ids = append(ids, int32(text[i]))
	}
	if req.ReturnTokenIDs {
		choice["token_ids"] = ids
	}
	if req.Logprobs {
		lps := make([]map[string]any, len(ids))
		for i, id := range ids {
			lps[i] = map[string]any{"token": fmt.Sprintf("token_id:%d", id), "logprob": -0.25}
		}
		choice["logprobs"] = map[string]any{"content": lps}
	}
	prompt := 0
	for _, msg := range req.Messages {
		prompt += len(msg.Content)/4 + 4
	}
	writeJSON(w, 200, map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "model": req.Model,
		"choices": []any{choice}, "usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": len(ids),
			"total_tokens": prompt + len(ids)}})
}

// find returns the task whose question and context start appear in goal.
func (m *FakeModel) find(goal string) *tasks.Task {
	for i := range m.tasks {
		v := &m.tasks[i].View
		q, _, _ := strings.Cut(v.Question, "\n")
		ctx := v.Context
		if len(ctx) > 100 {
			ctx = ctx[:100]
		}
		if strings.Contains(goal, q) && strings.Contains(goal, ctx) {
			return &m.tasks[i]
		}
	}
	return nil
}

func apiError(msg string) map[string]any {
	return map[string]any{"error": map[string]any{"message": msg, "type": "BadRequestError", "code": 400}}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
