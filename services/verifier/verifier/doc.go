// Package verifier is the verifier service, wired to the bus. It has two jobs:
//
//   - per turn: check each code execution that asks for it against the
//     ground truth (which lives here only) and pass the observation on to
//     the llm-worker with the verdict;
//   - per episode: score the finished episode, write its trajectory row to
//     the store, and only then ack the message and publish the score. A
//     store that is down leaves messages unacked (they are redelivered with
//     backoff); a redelivered episode already in the store is skipped by
//     the store's episode-id dedupe, so every episode is stored exactly
//     once. Once the store has refused every row of a run for
//     Config.StoreGiveUp, the run's episodes it refuses are dead-lettered
//     with its error, and the dispatcher fails the run with that reason.
package verifier
