// Package llmworker is the llm-worker service, wired to the bus: it consumes episode
// requests and checked observations and hands them to internal/worker,
// which steps the episode (agent/episode) and decides what to re-publish
// on a redelivery; this package adapts the episode-state bucket (large
// states offloaded to the blob store) and the bus's Publish to the
// interfaces internal/worker declares, and maps an observation for an
// unknown episode to junk. The operator CLI runs it in-process; main.go
// runs it as its own process.
package llmworker
