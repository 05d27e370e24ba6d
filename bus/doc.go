// Package bus is the only medgym code that knows about NATS JetStream acks.
//
// It creates the streams, consumers and key-value buckets named in schemas,
// publishes messages with deterministic Nats-Msg-Id headers (so a re-publish
// after a crash is dropped by the stream's duplicate window), and runs typed
// handlers on a Watermill Router over watermill-nats' JetStream subscriber.
//
// Ack policy, in one place:
//   - handler returns nil: Ack (double ack: the server confirms it).
//   - handler returns Permanent(err), or the payload does not decode or
//     validate: the message goes to the dead-letter stream with the reason,
//     then it is acked (Watermill's poison-queue middleware).
//   - any other error: Nak with a delay from an exponential backoff keyed on
//     the delivery count; JetStream redelivers up to MaxDeliver times, then
//     its max-deliveries advisory moves the message to the dead-letter
//     stream too (see WatchMaxDeliveries). No handler retries in a loop.
//   - shutdown: no ack; the message is redelivered to another process.
//   - long work: the InProgress middleware touches the message every
//     AckWait/3 so JetStream does not redeliver it while it is being worked on.
//
// Payload size: a payload over the server's max_payload (less headroom) is
// put in the MEDGYM_BLOBS object store, and the message carries its name in
// the Medgym-Blob header; Handle resolves it before decoding, and
// Conn.Payload does for code that reads a stream directly. StateKV does the
// same for key-value values (episode state). See blob.go and
// docs/adr/0010-payload-offload.md.
package bus
