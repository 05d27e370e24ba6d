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
// Exhausted retries wrap ErrUnavailable; answers no retry can fix (400,
// 401, 403, 404, 422, a response without choices) wrap ErrPermanent. A
// cancelled caller context is returned as the context's error, wrapping
// neither: the episode should be redelivered, not failed.
//
// The API key is sent as a bearer token, never logged, and redacted from
// every error string.
package llm
