// Package bus is the only medgym code that knows about NATS JetStream acks.
//
// It creates the streams, consumers and key-value buckets named in schemas
// (Provision, run once by `medgym nats provision` as the admin user on a
// server with users; without credentials every process creates them, see
// ProvisionMode and PrepareStreams; with them, processes only verify),
// publishes messages with deterministic Nats-Msg-Id headers (so a re-publish
// after a crash is dropped by the stream's duplicate window), and runs typed
// handlers on a Watermill Router over its own JetStream subscriber.
//
// Ack policy, in one place:
//   - handler returns nil: Ack (double ack: the server confirms it).
//   - junk, a message no handler could ever use: the body is not a JSON
//     object (empty, null, [], garbage), does not decode or validate as the
//     handler's type, or the handler returns Junk (a message for a run the
//     dispatcher never accepted, or an episode it never planned; see Runs):
//     Ack, counted in medgym_messages_junk_total{handler,reason} and logged
//     at most once per JunkLogInterval per handler. Junk is never
//     dead-lettered, so a flood of it cannot evict the dead letters that
//     matter.
//   - handler returns Permanent(err): a copy goes to the dead-letter stream
//     (subject medgym.deadletter.poison.<stream>, PoisonKind; a copy naming
//     a subject of another stream is ignored, PoisonFrom) with the reason
//     and original subject as headers, then the message is acked. The copy's
//     Nats-Msg-Id is dead/<stream>/<stream sequence>, so redeliveries of one
//     message make one dead letter, and a message that already carries a
//     reason (a replayed dead letter) keeps its first one.
//   - any other error: Nak with a delay from an exponential backoff keyed on
//     the delivery count; JetStream redelivers up to MaxDeliver times, then
//     its max-deliveries advisory moves the message to the dead-letter
//     stream too (see WatchMaxDeliveries; same id scheme). No handler
//     retries in a loop, but for one error: JetStream's store is full
//     (IsStorageFull: insufficient resources, no space left). The handler
//     is called again in place with a backoff, counted in
//     medgym_jetstream_storage_full_total, so a full store spends no
//     deliveries (ADR 31). The dead-letter copy of an exhausted message is
//     best effort; the dispatcher finds episodes left with no message in
//     play from stored state (Conn.EpisodesInPlay).
//   - the dead-letter path never produces dead letters: a handler on the
//     dead-letter stream that fails permanently has its message counted as
//     junk (reason dead_letter) and acked, and WatchMaxDeliveries ignores
//     the dead-letter stream.
//   - shutdown: no ack; the message is redelivered to another process.
//   - long work: in-progress acks every AckWait/3 keep JetStream from
//     redelivering a message while it is being worked on.
//   - every request the bus sends to NATS for a handler (a publish, a
//     key-value read or write, the ack's confirmation) is bounded by
//     requestTimeout (10 s; object-store and listing calls by bulkTimeout,
//     1 min), whatever the deadline of the caller's context: NATS never
//     fails a request whose reply was lost when the connection dropped,
//     and a handler waiting on one kept its message alive with in-progress
//     acks until that deadline (bound.go).
//
// The dead-letter stream is bounded: DefaultDeadLetterMaxAge (14 days),
// DefaultDeadLetterMaxBytes (1 GiB) and DefaultDeadLetterMaxMsgs (100,000),
// discarding the oldest (StreamOptions sets other bounds). Every other
// stream keeps messages for StreamOptions.MaxAge (7 days).
//
// Everything else a service needs of NATS is a typed primitive here, so
// that no package outside bus imports github.com/nats-io/... (archtest
// holds that rule):
//   - Bucket[T] (OpenBucket, OpenStateBucket): a key-value bucket of T with
//     Get, Create and Update at a revision, failing with ErrNotFound and
//     ErrConflict;
//   - Broadcast[T]: a core subscription every process hears (wake-ups,
//     sandbox release), for notifications that may be lost;
//   - Follow[T]: a stream subject read in order from its first message,
//     as an iterator of what is available now (Available) or one message
//     at a time (Next);
//   - Conn.Purge, and for tests and tools Conn.SubjectCount, StreamCount,
//     ConsumerBacklog, BusyConsumer, PublishRaw, PublishCore and the blob
//     calls. The raw connection and JetStream context are unexported.
//
// Connect fails at once when no server answers, unless WithConnectTimeout
// makes it wait (services: --connect-timeout, default until stopped), with
// backoff and a log line every 10 s; Start serves /healthz (503) while it
// waits.
//
// Connect takes credentials with WithAuth; AuthFromEnv reads them from the
// MEDGYM_NATS_* variables (a creds file, an nkey seed file, or a user and a
// password or password file), never from the command line. SECURITY.md and
// deploy/nats say which user may publish what. A connection's inboxes (the
// reply subjects of its requests, pulls and ordered consumers) are
// _INBOX.<user>. (InboxPrefix), the user of a password login or else the
// role given with WithRole, the only inboxes deploy/nats lets that user
// subscribe to (docs/adr/0036).
//
// Payload size: a payload over the server's max_payload (less headroom) is
// put in the connection's object store (its service's own with
// WithBlobService, else MEDGYM_BLOBS), and the message carries its name in
// the Medgym-Blob header and the store in Medgym-Blob-Bucket; Handle
// resolves it before decoding, and
// Conn.Payload does for code that reads a stream directly. StateKV does the
// same for key-value values (episode state). See blob.go and
// docs/adr/0010-payload-offload.md.
package bus
