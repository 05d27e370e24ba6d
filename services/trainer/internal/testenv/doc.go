// Package testenv starts a whole medgym pipeline in-process for the
// trainer's tests: an embedded JetStream server, the dispatcher, llm-worker,
// sandbox-worker and verifier services, a directory trajectory store, and a
// fake OpenAI-compatible model server that answers MedCalc tasks right or
// wrong on a fixed pattern and accepts vLLM's /v1/load_lora_adapter. It is
// imported by tests only.
package testenv
