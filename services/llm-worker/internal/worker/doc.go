// Package worker is the llm-worker's domain: it drives episodes
// (agent/episode) through their steps with the episode state kept in a
// StateStore and the next message published by a PublishFunc, both
// declared here, so the redelivery rules are tested without NATS:
//
//   - the state is saved before the step's message is published, so a
//     crash between the two re-publishes the same message (same message
//     id, deduplicated) instead of sampling the policy again;
//   - a redelivered request whose episode already began re-publishes the
//     pending action (or the result), and never starts the episode twice;
//   - a redelivered (stale) observation re-publishes the pending message;
//   - an observation for an episode no worker started is ErrUnknownEpisode;
//   - two workers racing on one episode cannot both win: saves are
//     create-once and compare-and-set at the revision read.
package worker
