package fakellm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/services/llm-worker/internal/llm"
)

func start(t *testing.T, cfg fakellm.Config) (*fakellm.Server, *httptest.Server) {
	t.Helper()
	fake := fakellm.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv
}

func client(t *testing.T, srv *httptest.Server, cfg llm.Config) *llm.Client {
	t.Helper()
	cfg.BaseURL = srv.URL + "/v1"
	if cfg.Model == "" {
		cfg.Model = fakellm.DefaultModel
	}
	if cfg.MaxRetryWait == 0 {
		cfg.MaxRetryWait = 5 * time.Millisecond
	}
	c, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func conversation(goal string, assistantTurns int) []schemas.ChatMessage {
	msgs := []schemas.ChatMessage{{Role: "system", Content: "sys"}, {Role: "user", Content: goal}}
	for i := range assistantTurns {
		msgs = append(msgs, schemas.ChatMessage{Role: "assistant", Content: "a"}, schemas.ChatMessage{Role: "user", Content: strings.Repeat("o", i+1)})
	}
	return msgs
}

func TestWireRoundTrip(t *testing.T) {
	t.Parallel()
	script := []string{`{"action":"validate_code","params":{"code":"print(1)"}}`, "second", "last"}
	_, srv := start(t, fakellm.Config{Policy: fakellm.PolicyScript, Script: script, Seed: 1})
	c := client(t, srv, llm.Config{RequestTokenIDs: true})
	for turns, want := range []string{script[0], script[1], script[2], script[2], script[2]} {
		msgs := conversation("How old is the patient?", turns)
		comp, err := c.Complete(t.Context(), llm.Request{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if comp.Text != want || comp.FinishReason != "stop" {
			t.Fatalf("turn %d: %q (%s), want %q", turns, comp.Text, comp.FinishReason, want)
		}
		wantIDs, wantPrompt := fakellm.CompletionTokenIDs(want), fakellm.PromptTokenIDs(msgs)
		if !slices.Equal(comp.TokenIDs, wantIDs) || !slices.Equal(comp.PromptTokenIDs, wantPrompt) {
			t.Fatalf("turn %d: ids %v / prompt %v, want %v / %v", turns, comp.TokenIDs, comp.PromptTokenIDs, wantIDs, wantPrompt)
		}
		if comp.CompletionTokens != len(wantIDs) || comp.PromptTokens != len(wantPrompt) || len(comp.Logprobs) != len(wantIDs) {
			t.Fatalf("turn %d: usage %d/%d, %d logprobs", turns, comp.PromptTokens, comp.CompletionTokens, len(comp.Logprobs))
		}
		for _, lp := range comp.Logprobs {
			if lp > 0 || lp < -2 {
				t.Fatalf("logprob %v out of range", lp)
			}
		}
		again, err := c.Complete(t.Context(), llm.Request{Messages: msgs})
		if err != nil || !slices.Equal(again.Logprobs, comp.Logprobs) {
			t.Fatalf("same request gave other logprobs: %v vs %v (%v)", again.Logprobs, comp.Logprobs, err)
		}
	}
}

func TestMaxTokensTruncates(t *testing.T) {
	t.Parallel()
	_, srv := start(t, fakellm.Config{Script: []string{"one two three four five"}})
	c := client(t, srv, llm.Config{RequestTokenIDs: true, UseMaxCompletionTokens: true})
	comp, err := c.Complete(t.Context(), llm.Request{Messages: conversation("q", 0), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if comp.Text != "one two" || comp.FinishReason != "length" || comp.CompletionTokens != 3 || len(comp.TokenIDs) != 3 {
		t.Fatalf("completion = %+v", comp)
	}
}

func TestRawResponseShape(t *testing.T) {
	t.Parallel()
	_, srv := start(t, fakellm.Config{Script: []string{"hi"}})
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"medgym-fake","messages":[{"role":"user","content":"q"}],"logprobs":true,"return_token_ids":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["object"] != "chat.completion" || raw["system_fingerprint"] != fakellm.Fingerprint || raw["model"] != "medgym-fake" {
		t.Fatalf("body = %s", data)
	}
	choice := raw["choices"].([]any)[0].(map[string]any)
	lp := choice["logprobs"].(map[string]any)["content"].([]any)[0].(map[string]any)
	if !strings.HasPrefix(lp["token"].(string), "token_id:") || lp["bytes"] == nil || lp["top_logprobs"] == nil {
		t.Fatalf("logprob entry = %v", lp)
	}
	usage := raw["usage"].(map[string]any)
	if usage["total_tokens"].(float64) != usage["prompt_tokens"].(float64)+usage["completion_tokens"].(float64) {
		t.Fatalf("usage = %v", usage)
	}
}

func TestReferencePolicy(t *testing.T) {
	t.Parallel()
	const goal, code = "Compute the BMI.", "answer = 22.5\nprint(answer)"
	var asked []string
	refs := func(g string) (string, bool) {
		asked = append(asked, g)
		return code, g == goal
	}
	tests := []struct {
		pCorrect float64
		wantRef  bool
	}{{1, true}, {0, false}}
	for _, tt := range tests {
		_, srv := start(t, fakellm.Config{Policy: fakellm.PolicyReference, PCorrect: tt.pCorrect, References: refs, Seed: 3})
		c := client(t, srv, llm.Config{})
		for turn := range 5 {
			comp, err := c.Complete(t.Context(), llm.Request{Messages: conversation(goal, turn)})
			if err != nil {
				t.Fatal(err)
			}
			act, err := agent.Parse(comp.Text)
			if err != nil || act.Name != schemas.ActionValidateCode {
				t.Fatalf("reply %q parses to %v, %v", comp.Text, act, err)
			}
			isRef := string(act.Params) == `{"code":"answer = 22.5\nprint(answer)"}`
			if isRef != tt.wantRef {
				t.Fatalf("PCorrect %v: reply %s", tt.pCorrect, act.Params)
			}
		}
	}
	if len(asked) == 0 || asked[0] != goal {
		t.Fatalf("References asked %q, want the first user message", asked)
	}
}

// TestRequestSeed: as in vLLM, a request's seed picks the sample: the same
// seed gives the same reply, and different seeds give different ones.
func TestRequestSeed(t *testing.T) {
	t.Parallel()
	_, srv := start(t, fakellm.Config{Policy: fakellm.PolicyReference, PCorrect: 0.5,
		References: func(string) (string, bool) { return "print(1)", true }, Seed: 3})
	c := client(t, srv, llm.Config{})
	reply := func(seed int64) string {
		comp, err := c.Complete(t.Context(), llm.Request{Messages: conversation("goal", 0), Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		return comp.Text
	}
	distinct := map[string]bool{}
	for seed := range int64(8) {
		r := reply(seed)
		if again := reply(seed); again != r {
			t.Fatalf("seed %d: %q then %q", seed, r, again)
		}
		distinct[r] = true
	}
	if len(distinct) < 4 {
		t.Fatalf("8 seeds gave %d distinct replies", len(distinct))
	}
}

func TestAlternatePolicy(t *testing.T) {
	t.Parallel()
	const ref = "answer = 22.5\nprint(answer)"
	_, srv := start(t, fakellm.Config{Policy: fakellm.PolicyAlternate,
		References: func(g string) (string, bool) { return ref, g == "goal" }})
	c := client(t, srv, llm.Config{})
	code := func(goal string, turn int, seed int64) string {
		comp, err := c.Complete(t.Context(), llm.Request{Messages: conversation(goal, turn), Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		var act struct {
			Params struct{ Code string } `json:"params"`
		}
		if err := json.Unmarshal([]byte(comp.Text), &act); err != nil {
			t.Fatalf("reply %q: %v", comp.Text, err)
		}
		return act.Params.Code
	}
	const crash, wrong = "x = 1/0\nprint(x)", "answer = -987654.321\nprint(answer)"
	// seed: first turn, second turn.
	want := map[int64][2]string{0: {ref, ref}, 1: {crash, ref}, 2: {ref, wrong}, 3: {crash, wrong}, 4: {ref, ref}}
	for seed, w := range want {
		for turn := range 2 {
			if got := code("goal", turn, seed); got != w[turn] {
				t.Fatalf("seed %d turn %d: %q, want %q", seed, turn, got, w[turn])
			}
		}
	}
	if got := code("unknown task", 0, 0); got != wrong {
		t.Fatalf("unknown task: %q", got)
	}
}

func TestGarbagePolicyNeverParses(t *testing.T) {
	t.Parallel()
	_, srv := start(t, fakellm.Config{Policy: fakellm.PolicyGarbage, Seed: 9})
	c := client(t, srv, llm.Config{})
	for i := range 30 {
		comp, err := c.Complete(t.Context(), llm.Request{Messages: conversation(strings.Repeat("q", i+1), 0)})
		if err != nil {
			t.Fatal(err)
		}
		if act, err := agent.Parse(comp.Text); err == nil {
			t.Fatalf("garbage %q parsed as %v", comp.Text, act)
		}
	}
}

func TestInjectedErrorsAreRetried(t *testing.T) {
	t.Parallel()
	run := func() (fakellm.Stats, int) {
		fake, srv := start(t, fakellm.Config{Script: []string{"ok"}, ErrorRate429: 0.3, ErrorRate500: 0.2, MalformedRate: 0.1, Seed: 42})
		c := client(t, srv, llm.Config{MaxRetries: 50})
		attempts := 0
		for i := range 40 {
			comp, err := c.Complete(t.Context(), llm.Request{Messages: conversation(strings.Repeat("q", i+1), 0)})
			if err != nil || comp.Text != "ok" {
				t.Fatalf("conversation %d: %q, %v", i, comp.Text, err)
			}
			attempts += comp.Attempts
		}
		return fake.Stats(), attempts
	}
	st, attempts := run()
	if st.Requests != attempts || st.ByModel[fakellm.DefaultModel] != attempts {
		t.Fatalf("stats %+v, client made %d attempts", st, attempts)
	}
	if st.ByStatus[429] == 0 || st.ByStatus[500] == 0 || st.ByStatus[200] <= 40 {
		t.Fatalf("stats %+v: want 429s, 500s and malformed 200s", st)
	}
	if again, _ := run(); !equalStats(again, st) {
		t.Fatalf("same seed, other faults: %+v vs %+v", again, st)
	}
}

func equalStats(a, b fakellm.Stats) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestInjectedHangAndMalformed(t *testing.T) {
	t.Parallel()
	hang, srv := start(t, fakellm.Config{Script: []string{"ok"}, TimeoutRate: 1})
	_, err := client(t, srv, llm.Config{Timeout: 50 * time.Millisecond, MaxRetries: -1}).Complete(t.Context(), llm.Request{Messages: conversation("q", 0)})
	if !errors.Is(err, llm.ErrUnavailable) || hang.Stats().ByStatus[0] != 1 {
		t.Fatalf("hang: %v, stats %+v", err, hang.Stats())
	}
	_, srv = start(t, fakellm.Config{Script: []string{"ok"}, MalformedRate: 1})
	_, err = client(t, srv, llm.Config{MaxRetries: 2}).Complete(t.Context(), llm.Request{Messages: conversation("q", 0)})
	if !errors.Is(err, llm.ErrUnavailable) || !strings.Contains(err.Error(), "decode response") {
		t.Fatalf("malformed: %v", err)
	}
}

func TestLoRAAdapters(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, fakellm.Config{Script: []string{"ok"}})
	lora := client(t, srv, llm.Config{Model: "policy-v1"})
	msgs := conversation("q", 0)
	if _, err := lora.Complete(t.Context(), llm.Request{Messages: msgs}); !errors.Is(err, llm.ErrPermanent) || !strings.Contains(err.Error(), "status 404") {
		t.Fatalf("unknown model: %v", err)
	}
	post := func(path, body string) (int, string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/v1/load_lora_adapter", `{"lora_name":"policy-v1","lora_path":"/ckpt/v1"}`); code != 200 || !strings.Contains(body, "policy-v1") {
		t.Fatalf("load: %d %s", code, body)
	}
	if code, _ := post("/v1/load_lora_adapter", `{"lora_name":"policy-v1","lora_path":"/ckpt/v1"}`); code != 400 {
		t.Fatalf("second load: %d, want 400", code)
	}
	if code, _ := post("/v1/load_lora_adapter", `{"lora_name":"x"}`); code != 400 {
		t.Fatalf("load without path: %d, want 400", code)
	}
	if comp, err := lora.Complete(t.Context(), llm.Request{Messages: msgs}); err != nil || comp.Text != "ok" {
		t.Fatalf("adapter: %q, %v", comp.Text, err)
	}
	if p, ok := fake.Adapter("policy-v1"); !ok || p != "/ckpt/v1" || !slices.Equal(fake.Loads(), []string{"policy-v1"}) {
		t.Fatalf("adapter path %q %v, loads %v", p, ok, fake.Loads())
	}
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if models.Object != "list" || len(models.Data) != 2 || models.Data[1].ID != "policy-v1" || models.Data[1].Parent == nil || *models.Data[1].Parent != fakellm.DefaultModel {
		t.Fatalf("models = %+v", models)
	}
	if code, _ := post("/v1/unload_lora_adapter", `{"lora_name":"policy-v1"}`); code != 200 {
		t.Fatalf("unload: %d", code)
	}
	if code, _ := post("/v1/unload_lora_adapter", `{"lora_name":"policy-v1"}`); code != 404 {
		t.Fatalf("second unload: %d, want 404", code)
	}
	if _, err := lora.Complete(t.Context(), llm.Request{Messages: msgs}); !errors.Is(err, llm.ErrPermanent) {
		t.Fatalf("after unload: %v", err)
	}
	if st := fake.Stats(); st.ByModel["policy-v1"] != 3 || st.ByStatus[404] != 2 || st.ByStatus[200] != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	_, srv := start(t, fakellm.Config{})
	resp, err := http.Get(srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health = %d", resp.StatusCode)
	}
}

func TestTokenizeJoinsBack(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "print(answer)  # é ü\n\tx_1=2", `{"a": [1, 2]}`} {
		if got := strings.Join(fakellm.Tokenize(s), ""); got != s {
			t.Errorf("Tokenize(%q) joins to %q", s, got)
		}
	}
}
