package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestContextOverflowIsItsOwnError: a 400 that says the conversation does
// not fit the model's context (vLLM's, OpenAI's and SGLang's words) is
// ErrContextOverflow, not retried; another 400 is not.
func TestContextOverflowIsItsOwnError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		overflow   bool
	}{
		{"vllm", `{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4900 in the messages, 100 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}}`, true},
		{"openai", `{"error":{"message":"Input too long.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, true},
		{"sglang", `{"object":"error","message":"The input (9000 tokens) is longer than the model's context length (8192 tokens).","type":"BadRequestError","code":400}`, true},
		{"other 400", `{"error":{"message":"max_tokens is too large","type":"invalid_request_error"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, n := sequence(t, respond(400, tc.body))
			c, _ := newTestClient(t, srv, Config{WaitOutage: true})
			_, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
			if !errors.Is(err, ErrPermanent) || errors.Is(err, ErrContextOverflow) != tc.overflow || n.Load() != 1 {
				t.Fatalf("error %v after %d requests; want permanent, context overflow %v, 1 request", err, n.Load(), tc.overflow)
			}
		})
	}
}

// TestWaitOutageOutlastsRetries: with WaitOutage, an endpoint that answers
// 503 twenty times in a row (far past MaxRetries) is waited out, and the
// breaker reports it down meanwhile and up again after; without, the call
// gives up after MaxRetries.
func TestWaitOutageOutlastsRetries(t *testing.T) {
	t.Parallel()
	var c *Client
	var sawDown atomic.Bool
	down := respond(503, `{"error":{"message":"no replicas","type":"ServiceUnavailable"}}`)
	handlers := make([]http.HandlerFunc, 0, 21)
	for i := range 20 {
		handlers = append(handlers, func(w http.ResponseWriter, r *http.Request) {
			if i == 10 && c.Health().Down {
				sawDown.Store(true)
			}
			down(w, r)
		})
	}
	srv, n := sequence(t, append(handlers, respond(200, okBody))...)
	c, waits := newTestClient(t, srv, Config{MaxRetries: 2, WaitOutage: true})
	comp, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")})
	if err != nil || comp.Attempts != 21 || n.Load() != 21 || len(*waits) != 20 {
		t.Fatalf("%v after %d requests, %d waits: want the 21st to answer", err, n.Load(), len(*waits))
	}
	if !sawDown.Load() || c.Health().Down {
		t.Fatalf("health down during the outage %v, after %+v", sawDown.Load(), c.Health())
	}

	srv2, n2 := sequence(t, down)
	c2, _ := newTestClient(t, srv2, Config{MaxRetries: 2})
	if _, err := c2.Complete(t.Context(), Request{Messages: userMsg("hi")}); !errors.Is(err, ErrUnavailable) || n2.Load() != 3 {
		t.Fatalf("without WaitOutage: %v after %d requests, want ErrUnavailable after 3", err, n2.Load())
	}
}

// TestWaitOutageDeadline: a call waiting out an outage ends at its
// context's deadline wrapping ErrUnavailable (the endpoint's doing), also
// when the deadline meets a retry in flight; a call whose first request
// hangs until the deadline ends with the deadline alone (the model's
// doing).
func TestWaitOutageDeadline(t *testing.T) {
	t.Parallel()
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	for _, tc := range []struct {
		name        string
		h           []http.HandlerFunc
		unavailable bool
	}{
		{"503", []http.HandlerFunc{respond(503, `overloaded`, "retry-after-ms", "5")}, true},
		{"hang", []http.HandlerFunc{hang}, false},
		// The deadline met a retry in flight (or waiting for a slot): the
		// endpoint had failed, so it is still the endpoint's doing.
		{"503 then hang", []http.HandlerFunc{respond(503, `overloaded`, "retry-after-ms", "5"), hang}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := sequence(t, tc.h...)
			c, _ := newTestClient(t, srv, Config{MaxRetries: 1, WaitOutage: true})
			c.sleep = sleepCtx
			// Past the first backoff (500 ms): "503 then hang" retries.
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err := c.Complete(ctx, Request{Messages: userMsg("hi")})
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) != tc.unavailable {
				t.Fatalf("error %v: want the deadline, unavailable %v", err, tc.unavailable)
			}
		})
	}
}

// TestOneBadRequestIsNotAnOutage: while other calls succeed, one request
// that keeps failing is not waited out: it gives up after MaxRetries
// charged retries even with WaitOutage (a failure with no answer to any call
// since the last one looks like an outage and is not charged).
func TestOneBadRequestIsNotAnOutage(t *testing.T) {
	t.Parallel()
	srv, _ := sequence(t, func(w http.ResponseWriter, r *http.Request) {
		if body := readBody(r); strings.Contains(body, "bad") {
			respond(500, `{"error":{"message":"engine error on this prompt"}}`)(w, r)
			return
		}
		respond(200, okBody)(w, r)
	})
	c, _ := newTestClient(t, srv, Config{MaxRetries: 4, WaitOutage: true})
	// Another episode's call succeeds during every other wait: the bad
	// request's failures alternate between looking like an outage and
	// not, and the charged ones still add up.
	waits := 0
	c.sleep = func(ctx context.Context, _ time.Duration, _ <-chan struct{}) error {
		if waits++; waits%2 == 1 {
			return nil
		}
		_, err := c.Complete(ctx, Request{Messages: userMsg("good")})
		return err
	}
	_, err := c.Complete(t.Context(), Request{Messages: userMsg("bad")})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "after 11 attempts") || c.Health().Down {
		t.Fatalf("error %v, health %+v: want ErrUnavailable after 11 attempts (the 3rd, 5th, ... 11th charged), endpoint up", err, c.Health())
	}
}

// TestRecoveryWakesWaiters: a call waiting out an outage (the server asked
// for 60 s) retries as soon as another call gets an answer.
func TestRecoveryWakesWaiters(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	srv, _ := sequence(t, func(w http.ResponseWriter, r *http.Request) {
		if up.Load() {
			respond(200, okBody)(w, r)
			return
		}
		respond(503, `down`, "Retry-After", "60")(w, r)
	})
	c, _ := newTestClient(t, srv, Config{WaitOutage: true})
	c.sleep = sleepCtx
	for range breakerThreshold {
		c.br.failure(time.Now()) // the endpoint has been failing for other calls
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Complete(t.Context(), Request{Messages: userMsg("waiting")})
		done <- err
	}()
	for c.Health().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	up.Store(true)
	if _, err := c.Complete(t.Context(), Request{Messages: userMsg("probe")}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || c.Health().Waiting != 0 {
			t.Fatalf("woken call: %v, health %+v", err, c.Health())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting call was not woken by the answer")
	}
}

func readBody(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// TestWaitOutageKeepsBackoff: while a call waits out an outage (no retry
// bound holds), a server asking for 1 ms between retries gets the
// client's backoff instead, growing as usual; a charged retry keeps the
// server's ask.
func TestWaitOutageKeepsBackoff(t *testing.T) {
	t.Parallel()
	limited := respond(429, `{"error":{"message":"rate limited"}}`, "retry-after-ms", "1")
	srv, _ := sequence(t, limited, limited, limited, limited, limited, respond(200, okBody))
	c, waits := newTestClient(t, srv, Config{MaxRetries: 2, WaitOutage: true})
	if _, err := c.Complete(t.Context(), Request{Messages: userMsg("hi")}); err != nil {
		t.Fatal(err)
	}
	if len(*waits) != 5 {
		t.Fatalf("%d waits, want 5", len(*waits))
	}
	for i, w := range *waits {
		if want := c.backoff(i+1, 0); w < want {
			t.Errorf("wait %d: %s, want at least the backoff %s", i+1, w, want)
		}
	}

	srv2, _ := sequence(t, limited, respond(200, okBody))
	c2, waits2 := newTestClient(t, srv2, Config{MaxRetries: 2})
	if _, err := c2.Complete(t.Context(), Request{Messages: userMsg("hi")}); err != nil || len(*waits2) != 1 || (*waits2)[0] != time.Millisecond {
		t.Fatalf("without WaitOutage: %v, waits %v; want one wait of the server's 1 ms", err, *waits2)
	}
}
