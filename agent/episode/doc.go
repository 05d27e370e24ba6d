// Package episode is the agent protocol's episode loop (driven by the
// llm-worker over the bus, and by the environment server over HTTP) as plain functions over
// state: Start builds the prompt and takes the first policy step; Continue
// folds in an observation and takes the next. Each returns the new
// schemas.EpisodeState and what to publish next (an action for a sandbox
// worker, or the finished episode for the verifier). The caller saves the
// state before publishing, so a crash between the two re-publishes the same
// message instead of sampling the policy again.
//
// Rules, as upstream unless said otherwise:
//   - a reply that does not parse consumes a turn; the raw text is kept in
//     the trajectory (upstream drops it) and the model is told the error;
//   - EndOn "accepted": the first code execution the verifier accepts ends
//     the episode; "answer": only an explicit answer action does; "both";
//   - ShowVerdict appends the verifier's verdict to a code run's
//     observation (upstream never shows it); with EndOn "answer" it is the
//     only reason code runs are checked at all;
//   - an action the task does not permit, and a rejected answer (EndOn
//     "accepted"), consume a turn with an error observation and are never
//     executed nor replayed;
//   - the loop guard sees the same action with the same params as the
//     previous turn and either warns the model or stops with outcome loop;
//   - MaxTurns policy steps at most; a policy that keeps failing beyond its
//     client's retries ends the episode with infra_failure;
//   - bounds (medgym's, upstream has none): a reply over agent.MaxReplyBytes
//     is a format error kept capped (head and tail, full size recorded); a
//     conversation over agent.MaxConversationBytes, or a policy error
//     wrapping ErrContextOverflow, ends the episode at the turn limit with
//     no answer (Error says "context overflow");
//   - the episode's clock (EpisodeTimeoutSec, else Engine.DefaultTimeout)
//     cancels the model call in flight: the episode ends as a timeout, or as
//     infra_failure when the endpoint was failing (ErrUnavailable) while the
//     clock ran out.
package episode
