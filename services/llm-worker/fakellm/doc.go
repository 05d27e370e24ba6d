// Package fakellm is a TEST TOOL: a protocol-faithful fake of an
// OpenAI-compatible chat-completions server (vLLM flavoured), for running
// medgym end to end without a model. Every response carries
// system_fingerprint "medgym-fake-llm" so it is never mistaken for a model.
//
// It serves POST /v1/chat/completions (usage, finish_reason, logprobs with
// "token_id:<n>" tokens, vLLM's return_token_ids), GET /v1/models,
// GET /health, and vLLM's runtime LoRA endpoints (POST
// /v1/load_lora_adapter, /v1/unload_lora_adapter); a loaded adapter is then
// served under its name, and an unknown model gets a 404 in the OpenAI error
// shape.
//
// Replies come from a policy (Config.Policy):
//   - "script": the i-th reply of a conversation is Script[i] (i = number of
//     assistant messages in the request), repeating the last;
//   - "reference": with probability PCorrect the task's reference solution as
//     a validate_code action (Config.References looks it up by the first user
//     message), else, with probability GarbageRate, unparseable text, else a
//     valid program that prints a wrong number;
//   - "garbage": unparseable text (prose, truncated JSON, unknown actions);
//   - "mixed": like "reference", but a fifth of the replies explore the data
//     (a program listing /data) and a fifth are garbage;
//   - "alternate": a fixed mix for RL tests, chosen by the request's seed k
//     (0 when absent): the first turn is the reference solution for an even
//     k and a crashing program for an odd one; a later turn is the reference
//     when k/2 is even and a wrong number when it is odd. The dispatcher
//     sends sample k of a run seeded s the seed s+k, so with an even s the
//     K = 4 samples of a task give 3 successes (one after a failed attempt)
//     and 1 failure.
//
// Server faults are injected at the configured rates, decided per request:
// 429 with Retry-After, 500, a request that hangs until the client gives up,
// and a malformed JSON body. Everything is deterministic given Config.Seed
// and the request: the reply depends on (seed, conversation, the request's
// seed field when set, as vLLM's sampling does), the fault on
// (seed, conversation, how many times this exact conversation was asked),
// so a retried request can succeed and then gets the same reply. Token ids
// come from a small deterministic tokenizer (Tokenize, TokenID) so tests can
// check them end to end.
package fakellm
