// Package session is the environment server's domain: sessions over the
// agent protocol (agent/episode) whose model is the HTTP client. It plays
// the llm-worker's part with the policy outside: a session's episode is an
// episode.Engine run whose Policy answers with the reply a step brought
// (or episode.ErrAwaitReply), so the prompt, the parser, the episode rules
// and the trajectory are the llm-worker's.
//
// A step is idempotent by its turn: the answer of every finished step is
// stored in the session, so a step retried with the same turn (after a
// lost reply or a server restart) is answered from the store and never
// executed twice; a turn ahead of the session is refused (ErrTurnOrder).
// The state is saved before anything is published (as the llm-worker
// does), so a crash between the two re-publishes the same message, which
// the stream's duplicate window drops.
//
// Everything reaches the outside through interfaces declared here (Store,
// Catalog, PublishFunc, RunRegistry); the package imports neither NATS nor
// bus, and its tests run on in-memory fakes.
package session
