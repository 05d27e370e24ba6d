// Package testenv starts a whole medgym pipeline in-process for the
// trainer's system tests (systemtest/trainer): an embedded JetStream
// server, the dispatcher, llm-worker, sandbox-worker and verifier services
// (each built from its Config and flags, as its main builds it), a
// directory trajectory store, and the llm-worker's fake OpenAI-compatible
// model server (fakellm) with its alternate policy, which answers MedCalc
// tasks right or wrong on a fixed pattern set by the request seed, accepts
// vLLM's /v1/load_lora_adapter and serves loaded adapters by name. It is
// imported by tests only.
package testenv
