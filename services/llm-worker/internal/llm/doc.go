// Package llm is a client for OpenAI-compatible chat-completions endpoints
// (OpenAI, vLLM, SGLang, Ollama's OpenAI layer, medgym's fake-llm).
//
// It records what RL training needs token-exactly: with
// Config.RequestTokenIDs it asks vLLM for the prompt and completion token
// ids (return_token_ids) and per-token logprobs, and reads them back in
// either of vLLM's shapes.
//
// # Retries
//
// Complete retries an idempotent outbound call only: HTTP 408, 409, 429 and
// 5xx answers, per-attempt timeouts, connection errors and unreadable 200
// bodies, with exponential backoff (0.5 s·2^n, at most 8 s, up to 25 %
// jitter) or the server's retry-after-ms / Retry-After, each wait capped by
// Config.MaxRetryWait. A server's x-should-retry header overrides the
// status. The loop is bounded twice: at most Config.MaxRetries retries, and
// no retry starts a wait that would end later than Config.RetryBudget after
// the first attempt began. One Complete call therefore takes at most about
// RetryBudget + Timeout (plus any wait for a concurrency slot). That is
// meant to stay well under the llm-worker's JetStream AckWait window, which
// the caller keeps open with in-progress acks.
//
// With Config.WaitOutage (the llm-worker sets it) an endpoint that is down
// for every call is waited out instead: a failure while no call of the
// client got an answer since this call's last failure is not charged to
// MaxRetries or RetryBudget, and the call retries (backoff, or the server's
// ask) until its context ends, woken as soon as any call gets an answer.
// The caller's deadline (the episode's clock) is then the bound; a call
// whose deadline passes while it waits wraps ErrUnavailable and
// context.DeadlineExceeded, one whose request was in flight (a slow or
// hanging model) the deadline alone. Client.Health reports the endpoint
// down after three such failures in a row, and the calls waiting.
//
// Exhausted retries wrap ErrUnavailable; answers no retry can fix (400,
// 401, 403, 404, 422, a response without choices, a body over 64 MiB) wrap
// ErrPermanent, and a 400 that says the conversation is over the model's
// context also ErrContextOverflow. A cancelled caller context is returned
// as the context's error, wrapping neither: the episode should be
// redelivered, not failed.
//
// The API key is sent as a bearer token, never logged, and redacted from
// every error string.
package llm
