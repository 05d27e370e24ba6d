package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/medgym/medgym/schemas"
)

// Errors a Completion can end with.
var (
	// ErrPermanent: the endpoint refused the request in a way no retry fixes.
	ErrPermanent = errors.New("llm request failed permanently")
	// ErrUnavailable: the endpoint stayed unreachable, overloaded or broken
	// through every retry, or until the caller's deadline.
	ErrUnavailable = errors.New("llm endpoint unavailable")
	// ErrContextOverflow (with ErrPermanent): the endpoint refused the
	// request because the conversation does not fit the model's context
	// (a 400 saying so: OpenAI's context_length_exceeded, vLLM's "maximum
	// context length", SGLang's "longer than the model's context length").
	ErrContextOverflow = errors.New("the conversation exceeds the model's context")
)

// Defaults for zero Config fields.
const (
	DefaultTimeout       = 5 * time.Minute
	DefaultMaxConcurrent = 8
	DefaultMaxRetries    = 4
	DefaultMaxRetryWait  = 60 * time.Second
	DefaultRetryBudget   = 10 * time.Minute

	maxResponseBytes = 64 << 20
)

// Config configures a Client. Zero values take the defaults above.
type Config struct {
	// BaseURL is the API root including its version, as in the OpenAI SDK:
	// "https://api.openai.com/v1", "http://vllm:8000/v1".
	BaseURL string
	// Model is sent as "model" (a vLLM LoRA adapter name works too).
	Model string
	// APIKey is sent as a bearer token when set; it is never logged.
	APIKey string
	// Timeout bounds one HTTP attempt.
	Timeout time.Duration
	// MaxConcurrent bounds this client's requests in flight.
	MaxConcurrent int
	// MaxRetries bounds retries after the first attempt; negative: none.
	MaxRetries int
	// MaxRetryWait caps one wait between attempts, whatever the server asks.
	MaxRetryWait time.Duration
	// RetryBudget bounds the time from the first attempt to the start of the
	// last one (see the package doc).
	RetryBudget time.Duration
	// NoTemperature omits temperature and top_p, for models that refuse
	// them (OpenAI o-series). A setting, not a guess from the model name.
	NoTemperature bool
	// UseMaxCompletionTokens sends max_completion_tokens instead of the
	// deprecated max_tokens (required by OpenAI reasoning models).
	UseMaxCompletionTokens bool
	// WaitOutage makes a call wait out an endpoint that is down instead of
	// failing: an attempt that fails as an outage does (refused, 429, 5xx,
	// an unreadable body; not a request that timed out) while no call of
	// this client got an answer counts against neither MaxRetries nor
	// RetryBudget, and the call retries with backoff, woken at once when
	// any call succeeds, until its context ends. (While other calls get
	// answers, a failing request is charged as usual.) A call whose deadline passes while it waits wraps
	// ErrUnavailable and the context's error. The caller bounds the wait
	// with its context (the llm-worker: the episode's clock).
	WaitOutage bool
	// RequestTokenIDs asks a vLLM server for token ids and logprobs:
	// logprobs:true, top_logprobs:0, return_token_ids:true and
	// return_tokens_as_token_ids:true.
	RequestTokenIDs bool
	// Logger receives retry notices; nil discards them.
	Logger *slog.Logger
	// HTTPClient replaces the default client (its Timeout should be 0:
	// attempts are bounded by Timeout).
	HTTPClient *http.Client
}

// Request is one chat completion request.
type Request struct {
	Messages    []schemas.ChatMessage
	Temperature *float64
	TopP        *float64
	MaxTokens   int
	Seed        *int64
	Stop        []string
	User        string
}

// Completion is the first choice of a chat completion, with what training
// needs to reproduce it token by token.
type Completion struct {
	Text         string
	Reasoning    string
	FinishReason string

	PromptTokens     int
	CompletionTokens int
	// PromptTokenIDs and TokenIDs are set when the server returns them
	// (vLLM with Config.RequestTokenIDs). Logprobs[i] belongs to TokenIDs[i].
	PromptTokenIDs []int32
	TokenIDs       []int32
	Logprobs       []float32

	// Latency is the wall time of Complete from the first attempt on,
	// including retries and their waits.
	Latency time.Duration
	// Attempts is the number of HTTP attempts made (1 without retries).
	Attempts int
}

// Client talks to one OpenAI-compatible endpoint. It is safe for
// concurrent use.
type Client struct {
	cfg      Config
	endpoint string
	http     *http.Client
	sem      chan struct{}
	log      *slog.Logger
	jitter   func() float64 // in [0, 1)
	// sleep waits d, or until wake is closed (nil: never) or ctx ends.
	sleep func(ctx context.Context, d time.Duration, wake <-chan struct{}) error
	br    *breaker
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("llm config: base url is empty")
	}
	if !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://") {
		return nil, fmt.Errorf("llm config: base url %q must start with http:// or https://", schemas.RedactURL(cfg.BaseURL))
	}
	if cfg.Model == "" {
		return nil, errors.New("llm config: model is empty")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.MaxRetryWait <= 0 {
		cfg.MaxRetryWait = DefaultMaxRetryWait
	}
	if cfg.RetryBudget <= 0 {
		cfg.RetryBudget = DefaultRetryBudget
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{
		cfg:      cfg,
		endpoint: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions",
		http:     hc,
		sem:      make(chan struct{}, cfg.MaxConcurrent),
		log:      log,
		jitter:   rand.Float64,
		sleep:    sleepCtx,
		br:       newBreaker(),
	}, nil
}

// Endpoint returns the client's base URL and model.
func (c *Client) Endpoint() (baseURL, model string) { return c.cfg.BaseURL, c.cfg.Model }

// Health says whether the client's endpoint is down and how many calls
// wait for it (Config.WaitOutage).
func (c *Client) Health() Health { return c.br.health() }

// Complete sends req and returns the first choice, retrying transient
// failures as the package doc describes.
func (c *Client) Complete(ctx context.Context, req Request) (Completion, error) {
	body, err := json.Marshal(c.wireRequest(req))
	if err != nil {
		return Completion{}, fmt.Errorf("encode chat request: %w", err)
	}
	endpoint := schemas.RedactURL(c.endpoint)
	start := time.Now()
	budgetStart, charged := start, 0 // retries counted against MaxRetries and RetryBudget
	answered := c.br.answered()      // answers of any call by the last failure
	var outage *failure              // the last failure, when it said the endpoint is down
	// ended is the error of a call whose context ended: when it ended in a
	// retry after the endpoint failed (waiting, or in flight, or waiting
	// for a slot), the deadline is the endpoint's doing and wraps
	// ErrUnavailable; else the context's error alone (a slow or hanging
	// model, a cancelled caller).
	ended := func(err error, attempt int) error {
		if outage != nil && errors.Is(err, context.DeadlineExceeded) {
			return c.errorf(ErrUnavailable, err, "chat completion at %s: %s until the deadline (%d attempts)", endpoint, outage.msg, attempt)
		}
		return c.errorf(err, nil, "chat completion at %s: %v", endpoint, err)
	}
	for attempt := 1; ; attempt++ {
		comp, fail := c.attempt(ctx, body)
		if fail == nil {
			if since := c.br.success(); !since.IsZero() {
				c.log.LogAttrs(ctx, slog.LevelWarn, "llm endpoint answers again",
					slog.String("endpoint", endpoint), slog.Duration("down_for", time.Since(since).Round(time.Millisecond)))
			}
			comp.Latency = time.Since(start)
			comp.Attempts = attempt
			return comp, nil
		}
		if err := ctx.Err(); err != nil {
			return Completion{}, ended(err, attempt)
		}
		if !fail.retry {
			return Completion{}, c.errorf(ErrPermanent, fail.cause, "chat completion at %s: %s", endpoint, fail.msg)
		}
		var (
			open, opened bool
			woken        <-chan struct{}
		)
		outage = nil
		if !fail.slow {
			outage = fail
			open, opened, woken = c.br.failure(time.Now())
		}
		if opened {
			c.log.LogAttrs(ctx, slog.LevelWarn, "llm endpoint down",
				slog.String("endpoint", endpoint), slog.Int("failures_in_a_row", breakerThreshold), slog.String("error", c.redact(fail.msg)))
		}
		wait := c.backoff(attempt, fail.retryAfter)
		prev := answered
		answered = c.br.answered()
		if c.cfg.WaitOutage && outage != nil && answered == prev {
			// No call got an answer since this one last failed: the
			// endpoint is down, not this request's problem. Wait it out;
			// the retry budget's time starts again (the retries charged so
			// far stay charged: a request that fails while others get
			// answers still gives up after MaxRetries). No retry bound
			// holds now, so the server's ask never makes the wait shorter
			// than the backoff: an endpoint that answers 429 with
			// retry-after-ms 1 for an hour is not asked 1000 times a second.
			budgetStart = time.Now()
			wait = max(wait, c.backoff(attempt, 0))
		} else {
			charged++
			if charged > c.cfg.MaxRetries || time.Since(budgetStart)+wait > c.cfg.RetryBudget {
				return Completion{}, c.errorf(ErrUnavailable, fail.cause, "chat completion at %s: %s (after %d attempts)", endpoint, fail.msg, attempt)
			}
			woken = nil
		}
		level := slog.LevelWarn
		if open {
			level = slog.LevelDebug // one line when the endpoint goes down, one when it is back
		}
		c.log.LogAttrs(ctx, level, "llm request failed, retrying",
			slog.String("endpoint", endpoint), slog.Int("attempt", attempt), slog.Bool("endpoint_down", open),
			slog.String("error", c.redact(fail.msg)), slog.Duration("wait", wait))
		if woken != nil {
			c.br.enter()
		}
		err := c.sleep(ctx, wait, woken)
		if woken != nil {
			c.br.leave()
		}
		if err != nil {
			return Completion{}, ended(err, attempt)
		}
	}
}

// failure is one failed attempt.
type failure struct {
	msg        string
	retry      bool
	retryAfter time.Duration // 0: use backoff
	// slow: the attempt timed out (Config.Timeout): the model is slow or
	// hangs, which says nothing about the endpoint being down.
	slow  bool
	cause error
}

func (c *Client) attempt(ctx context.Context, body []byte) (Completion, *failure) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return Completion{}, &failure{msg: ctx.Err().Error(), cause: ctx.Err()}
	}
	defer func() { <-c.sem }()

	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return Completion{}, &failure{msg: err.Error(), cause: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if c.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		msg := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			msg = ue.Err.Error() // the endpoint is named by the caller's message
		}
		slow := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		if slow {
			msg = fmt.Sprintf("no answer within %s", c.cfg.Timeout)
		}
		return Completion{}, &failure{msg: msg, retry: true, slow: slow, cause: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		slow := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		return Completion{}, &failure{msg: "read response: " + err.Error(), retry: true, slow: slow, cause: err}
	}
	if len(data) > maxResponseBytes {
		// Not retried: the same request would get the same answer.
		return Completion{}, &failure{msg: fmt.Sprintf("status %d: the response is over %d bytes", resp.StatusCode, maxResponseBytes)}
	}
	if resp.StatusCode != http.StatusOK {
		if msg := errorMessage(data); contextOverflow(resp.StatusCode, msg) {
			return Completion{}, &failure{msg: fmt.Sprintf("status %d: %s", resp.StatusCode, msg), cause: ErrContextOverflow}
		}
		return Completion{}, &failure{
			msg:        fmt.Sprintf("status %d: %s", resp.StatusCode, errorMessage(data)),
			retry:      shouldRetry(resp),
			retryAfter: retryAfter(resp.Header, time.Now()),
		}
	}
	comp, err := decodeCompletion(data)
	if err != nil {
		var p permanentError
		return Completion{}, &failure{msg: err.Error(), retry: !errors.As(err, &p), cause: err}
	}
	return comp, nil
}

func shouldRetry(resp *http.Response) bool {
	switch strings.ToLower(resp.Header.Get("x-should-retry")) {
	case "true":
		return true
	case "false":
		return false
	}
	s := resp.StatusCode
	return s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500
}

// retryAfter reads retry-after-ms, then Retry-After (seconds or an HTTP
// date). Zero means the server said nothing usable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// backoff is the wait before attempt+1: the server's ask, else 0.5 s·2^n
// (at most 8 s) minus up to 25 % jitter; both capped by MaxRetryWait.
func (c *Client) backoff(attempt int, serverAsk time.Duration) time.Duration {
	d := serverAsk
	if d <= 0 {
		d = min(500*time.Millisecond<<min(attempt-1, 10), 8*time.Second)
		d -= time.Duration(float64(d) * 0.25 * c.jitter())
	}
	return min(d, c.cfg.MaxRetryWait)
}

func sleepCtx(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// contextOverflow reports whether an error answer says the conversation
// does not fit the model's context: a 400 (413 from some proxies) whose
// message says so in OpenAI's, vLLM's or SGLang's words.
func contextOverflow(status int, msg string) bool {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		return false
	}
	m := strings.ToLower(msg)
	for _, s := range []string{"context_length_exceeded", "maximum context length", "context length", "context window", "prompt is too long"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// redact removes the API key from s.
func (c *Client) redact(s string) string {
	if c.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, c.cfg.APIKey, "[redacted]")
}

// clientError carries a redacted message and the errors it wraps, so
// errors.Is works without the key ever reaching Error().
type clientError struct {
	msg  string
	errs []error
}

func (e *clientError) Error() string   { return e.msg }
func (e *clientError) Unwrap() []error { return e.errs }

func (c *Client) errorf(kind, cause error, format string, args ...any) error {
	errs := []error{kind}
	if cause != nil && !errors.Is(cause, kind) {
		errs = append(errs, cause)
	}
	return &clientError{msg: c.redact(fmt.Sprintf(format, args...)), errs: errs}
}
