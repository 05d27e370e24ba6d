// Package policy provides the llm-worker's policies behind episode.Policy:
// Reference replays a task's reference solution through the same action
// contract a model uses (so the whole pipeline runs without a model, and
// it is labelled "reference" wherever it appears), and OpenAI calls any
// OpenAI-compatible chat-completions endpoint.
package policy
