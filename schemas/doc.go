// Package schemas is medgym's wire contract: the messages services exchange
// over NATS JetStream, the subjects, streams and durable consumer names they
// use, and (in subpackage parquet) the trajectory Parquet schema.
//
// Nothing here talks to a network. Every message type has a Validate method;
// decoders call it, so a malformed message is rejected at the edge with an
// error that names the field at fault. Breaking changes get a new subject or
// type, never a mutated one.
package schemas
