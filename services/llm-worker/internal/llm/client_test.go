package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

const okBody = `{"id":"c1","object":"chat.completion","created":1,"model":"m",
 "choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],
 "usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`

// newTestClient returns a client for srv whose waits are recorded instead of
// slept.
func newTestClient(t *testing.T, srv *httptest.Server, cfg Config) (*Client, *[]time.Duration) {
	t.Helper()
	cfg.BaseURL = srv.URL + "/v1"
	if cfg.Model == "" {
		cfg.Model = "m"
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		waits []time.Duration
	)
	c.sleep = func(ctx context.Context, d time.Duration, _ <-chan struct{}) error {
		mu.Lock()
		defer mu.Unlock()
		waits = append(waits, d)
		return ctx.Err()
	}
	c.jitter = func() float64 { return 0 }
	return c, &waits
}

// sequence answers the i-th request with handlers[min(i, len-1)].
func sequence(t *testing.T, handlers ...http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.Error(w, "wrong route "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		i := int(n.Add(1)) - 1
		// Read the body whole, as real servers do: only then does net/http
		// notice a client that hangs up and cancel r.Context().
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		handlers[min(i, len(handlers)-1)](w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func respond(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func userMsg(s string) []schemas.ChatMessage {
	return []schemas.ChatMessage{{Role: "user", Content: s}}
}

func TestCompleteRequestAndUsage(t *testing.T) {
	t.Parallel()
	var got map[string]any
	var auth string
	srv, _ := sequence(t, func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Errorf("decode request: %v", err)
		}
		respond(200, okBody)(w, r)
	})
	c, _ := newTestClient(t, srv, Config{Model: "qwen", APIKey: "sk-secret", UseMaxCompletionTokens: true, NoTemperature: true})
	temp, seed := 0.6, int64(7)
	comp, err := c.Complete(t.Context(), Request{Messages: userMsg("hi"), Temperature: &temp, TopP: &temp, MaxTokens: 100, Seed: &seed, Stop: []string{"\n\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if comp.Text != "hello" || comp.FinishReason != "stop" || comp.PromptTokens != 12 || comp.CompletionTokens != 3 || comp.Attempts != 1 {
		t.Fatalf("completion = %+v", comp)
	}
	if comp.TokenIDs != nil || comp.Logprobs != nil || comp.PromptTokenIDs != nil {
		t.Fatalf("token data without asking: %+v", comp)
	}
	if auth != "Bearer sk-secret" {
		t.Errorf("Authorization = %q", auth)
	}
	want := map[string]any{"model": "qwen", "stream": false, "max_completion_tokens": 100.0, "seed": 7.0, "stop": []any{"\n\n"},
		"messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	for k, v := range want {
		if gb, _ := json.Marshal(got[k]); string(gb) != mustJSON(t, v) {
			t.Errorf("request %s = %s, want %s", k, gb, mustJSON(t, v))
		}
	}
	for _, k := range []string{"temperature", "top_p", "max_tokens", "logprobs", "return_token_ids"} {
		if _, ok := got[k]; ok {
			t.Errorf("request has %s: %v", k, got)
		}
	}
}

func TestCompleteSendsSamplingAndTokenIDFlags(t *testing.T) {
	t.Parallel()
	var got map[string]any
	srv, _ := sequence(t, func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&got)
		respond(200, okBody)(w, r)
	})
	c, _ := newTestClient(t, srv, Config{RequestTokenIDs: true})
	temp := 0.0
	if _, err := c.Complete(t.Context(), Request{Messages: userMsg("hi"), Temperature: &temp, MaxTokens: 8}); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"temperature": 0.0, "max_tokens": 8.0, "logprobs": true, "top_logprobs": 0.0, "return_token_ids": true, "return_tokens_as_token_ids": true} {
		if got[k] != v {
			t.Errorf("request %s = %v, want %v", k, got[k], v)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCompleteRetries(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name      string
		first     http.HandlerFunc
		maxWait   time.Duration
		wantWaits []time.Duration
	}{
		{"429 retry-after seconds", respond(429, `{"error":{"message":"slow down","type":"rate_limit"}}`, "Retry-After", "2"), 0, []time.Duration{2 * time.Second}},
		{"429 retry-after-ms wins", respond(429, `{}`, "Retry-After", "2", "retry-after-ms", "150"), 0, []time.Duration{150 * time.Millisecond}},
		{"503 retry-after date capped", respond(503, `overloaded`, "Retry-After", date), 10 * time.Second, []time.Duration{10 * time.Second}},
		{"500 backoff", respond(500, `{"error":{"message":"boom","code":500}}`), 0, []time.Duration{500 * time.Millisecond}},
		{"408", respond(408, ``), 0, []time.Duration{500 * time.Millisecond}},
		{"400 with x-should-retry", respond(400, `{}`, "x-should-retry", "true"), 0, []time.Duration{500 * time.Millisecond}},
		{"malformed 200 body", respond(200, `{"choices":[{"message":`), 0, []time.Duration{500 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, n := sequence(t, tt.first, respond(200, okBody))
			c, waits := newTestClient(t, srv, Config{MaxRetryWait: tt.maxWait})
			comp, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
			if err != nil {
				t.Fatal(err)
			}
			if comp.Text != "hello" || comp.Attempts != 2 || n.Load() != 2 {
				t.Fatalf("completion %+v after %d requests", comp, n.Load())
			}
			if len(*waits) != 1 || (*waits)[0] != tt.wantWaits[0] {
				t.Fatalf("waits = %v, want %v", *waits, tt.wantWaits)
			}
		})
	}
}

func TestCompleteExhaustsRetries(t *testing.T) {
	t.Parallel()
	srv, n := sequence(t, respond(502, `bad gateway`))
	c, waits := newTestClient(t, srv, Config{MaxRetries: 3})
	_, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrPermanent) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	if n.Load() != 4 {
		t.Fatalf("%d requests, want 4", n.Load())
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}
	if mustJSON(t, *waits) != mustJSON(t, want) {
		t.Fatalf("waits = %v, want %v", *waits, want)
	}
	for _, s := range []string{"status 502", `"bad gateway"`, "after 4 attempts", srv.URL} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

func TestCompleteRetryBudget(t *testing.T) {
	t.Parallel()
	srv, n := sequence(t, respond(429, `{}`, "Retry-After", "30"))
	// The server asks for 30 s; that wait would end past the 20 s budget.
	c, _ := newTestClient(t, srv, Config{MaxRetries: 10, RetryBudget: 20 * time.Second})
	_, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
	if !errors.Is(err, ErrUnavailable) || n.Load() != 1 {
		t.Fatalf("error = %v after %d requests, want ErrUnavailable after 1", err, n.Load())
	}
}

func TestCompletePermanent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		status     int
		want       string
	}{
		{"openai nested", `{"error":{"message":"max_tokens is too large","type":"invalid_request_error","param":"max_tokens","code":null}}`, 400,
			"status 400: max_tokens is too large (type invalid_request_error)"},
		{"vllm nested int code", `{"error":{"message":"The model x does not exist.","type":"NotFoundError","code":404}}`, 404,
			"status 404: The model x does not exist. (type NotFoundError, code 404)"},
		{"old vllm flat", `{"object":"error","message":"bad prompt","type":"BadRequestError","param":null,"code":400}`, 400,
			"status 400: bad prompt (type BadRequestError, code 400)"},
		{"string error", `{"error":"nope"}`, 403, "status 403: nope"},
		{"plain text", `Unauthorized`, 401, `status 401: "Unauthorized"`},
		{"no choices", `{"id":"x","choices":[]}`, 200, "response has no choices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, n := sequence(t, respond(tt.status, tt.body))
			c, _ := newTestClient(t, srv, Config{})
			_, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
			if !errors.Is(err, ErrPermanent) || n.Load() != 1 {
				t.Fatalf("error = %v after %d requests, want ErrPermanent after 1", err, n.Load())
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q lacks %q", err, tt.want)
			}
		})
	}
}

func TestCompleteRedactsAPIKey(t *testing.T) {
	t.Parallel()
	const key = "sk-proj-VERYSECRET"
	srv, _ := sequence(t, respond(401, `{"error":{"message":"Incorrect API key provided: `+key+`."}}`))
	c, _ := newTestClient(t, srv, Config{APIKey: key})
	_, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("error = %v", err)
	}
}

func TestCompleteTimeout(t *testing.T) {
	t.Parallel()
	srv, n := sequence(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c, _ := newTestClient(t, srv, Config{Timeout: 50 * time.Millisecond, MaxRetries: 1})
	_, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Fatalf("error = %v", err)
	}
	if n.Load() != 2 {
		t.Fatalf("%d requests, want 2", n.Load())
	}
}

func TestCompleteCallerCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	srv, _ := sequence(t, func(w http.ResponseWriter, r *http.Request) {
		cancel()
		<-r.Context().Done()
	})
	c, _ := newTestClient(t, srv, Config{})
	_, err := c.Complete(ctx, Request{Messages: userMsg("hi")})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrPermanent) {
		t.Fatalf("error = %v, want context.Canceled only", err)
	}
}

func TestCompleteUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	c, waits := newTestClient(t, srv, Config{MaxRetries: 2})
	_, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), srv.URL+"/v1/chat/completions") {
		t.Fatalf("error = %v", err)
	}
	if len(*waits) != 2 {
		t.Fatalf("waits = %v, want 2", *waits)
	}
}

func TestCompleteTokenData(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body    string
		wantText      string
		wantReasoning string
		wantIDs       []int32
		wantPrompt    []int32
		wantLogprobs  []float32
	}{
		{"vllm return_token_ids", `{"prompt_token_ids":[1,2,3],"choices":[{"message":{"content":"ab","reasoning":"r1","reasoning_content":"old"},"finish_reason":"stop","token_ids":[7,8,151645],
			"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]},{"token":"b","logprob":-1.25,"bytes":[98],"top_logprobs":[]},{"token":"<|im_end|>","logprob":0,"bytes":null,"top_logprobs":[]}]}}]}`,
			"ab", "r1", []int32{7, 8, 151645}, []int32{1, 2, 3}, []float32{-0.5, -1.25, 0}},
		{"token_id strings", `{"choices":[{"message":{"content":"ab","reasoning_content":"old"},"finish_reason":"length",
			"logprobs":{"content":[{"token":"token_id:64","logprob":-0.25},{"token":"token_id:65","logprob":-9999.0}]}}]}`,
			"ab", "old", []int32{64, 65}, nil, []float32{-0.25, -9999}},
		{"plain tokens give no ids", `{"choices":[{"message":{"content":null,"refusal":"I can't"},"finish_reason":"stop","logprobs":{"content":[{"token":"I","logprob":-0.1}]}}]}`,
			"I can't", "", nil, nil, []float32{-0.1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := sequence(t, respond(200, tt.body))
			c, _ := newTestClient(t, srv, Config{RequestTokenIDs: true})
			comp, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
			if err != nil {
				t.Fatal(err)
			}
			if comp.Text != tt.wantText || comp.Reasoning != tt.wantReasoning {
				t.Errorf("text %q reasoning %q", comp.Text, comp.Reasoning)
			}
			if mustJSON(t, comp.TokenIDs) != mustJSON(t, tt.wantIDs) || mustJSON(t, comp.PromptTokenIDs) != mustJSON(t, tt.wantPrompt) ||
				mustJSON(t, comp.Logprobs) != mustJSON(t, tt.wantLogprobs) {
				t.Errorf("ids %v prompt %v logprobs %v", comp.TokenIDs, comp.PromptTokenIDs, comp.Logprobs)
			}
		})
	}
}

func TestCompleteConcurrencyLimit(t *testing.T) {
	t.Parallel()
	var inflight, peak atomic.Int32
	release := make(chan struct{})
	srv, _ := sequence(t, func(w http.ResponseWriter, r *http.Request) {
		cur := inflight.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		<-release
		inflight.Add(-1)
		respond(200, okBody)(w, r)
	})
	c, _ := newTestClient(t, srv, Config{MaxConcurrent: 2})
	const calls = 6
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
			errs <- err
		}()
	}
	for done := 0; done < calls; {
		waitFor(t, func() bool { return inflight.Load() == int32(min(2, calls-done)) })
		release <- struct{}{}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		done++
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak in flight = %d, want 2", p)
	}
}

// waitFor polls cond until it holds or the test's time runs out.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		h    map[string]string
		want time.Duration
	}{
		{map[string]string{"Retry-After": "3"}, 3 * time.Second},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"Retry-After": "0"}, 0},
		{map[string]string{"Retry-After": "soon"}, 0},
		{map[string]string{"Retry-After": now.Add(time.Minute).Format(http.TimeFormat)}, time.Minute},
		{map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{map[string]string{"retry-after-ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{map[string]string{"retry-after-ms": "-1", "Retry-After": "9"}, 9 * time.Second},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.h {
			h.Set(k, v)
		}
		if got := retryAfter(h, now); got != tt.want {
			t.Errorf("retryAfter(%v) = %v, want %v", tt.h, got, tt.want)
		}
	}
}

func TestBackoffJitterAndCap(t *testing.T) {
	t.Parallel()
	c, err := New(Config{BaseURL: "http://x/v1", Model: "m", MaxRetryWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.jitter = func() float64 { return 0.999 }
	if got := c.backoff(1, 0); got < 375*time.Millisecond || got > 500*time.Millisecond {
		t.Errorf("backoff(1) = %v, want 375–500ms", got)
	}
	if got := c.backoff(8, 0); got != 5*time.Second {
		t.Errorf("backoff(8) = %v, want the 5s cap", got)
	}
	if got := c.backoff(1, time.Hour); got != 5*time.Second {
		t.Errorf("server ask of 1h = %v, want the 5s cap", got)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Model: "m"}, {BaseURL: "ftp://x", Model: "m"}, {BaseURL: "http://x/v1"}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
