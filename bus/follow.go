package bus

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Message is one message a Follower read: its decoded value and the time
// the stream stored it.
type Message[T any] struct {
	Value T
	Time  time.Time
}

// Follower reads a stream's messages on one subject in order, from the
// first, with an ordered consumer: after a NATS outage it resumes after the
// last message it delivered. Messages that do not decode as T (or, when T
// is a schemas.Validator, do not validate) are skipped and counted.
type Follower[T any] struct {
	cons    jetstream.Consumer
	skipped int
}

// Follow starts reading stream's messages on subject (every subject of the
// stream when subject is empty).
func Follow[T any](ctx context.Context, c *Conn, stream, subject string) (*Follower[T], error) {
	cfg := jetstream.OrderedConsumerConfig{}
	if subject != "" {
		cfg.FilterSubjects = []string{subject}
	}
	cons, err := c.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	return &Follower[T]{cons: cons}, nil
}

// Skipped is the number of messages skipped as undecodable so far.
func (f *Follower[T]) Skipped() int { return f.skipped }

func (f *Follower[T]) decode(m jetstream.Msg) (Message[T], bool) {
	var out Message[T]
	v, err := decodeLoose[T](m.Data())
	if err != nil {
		f.skipped++
		return out, false
	}
	out.Value = v
	if md, err := m.Metadata(); err == nil {
		out.Time = md.Timestamp
	}
	return out, true
}

// Available yields the messages available now, in order, and ends when
// none is left; a later call continues after the last one yielded. A read
// that fails yields its error and ends.
func (f *Follower[T]) Available() iter.Seq2[Message[T], error] {
	return func(yield func(Message[T], error) bool) {
		for {
			batch, err := f.cons.FetchNoWait(500)
			if err != nil {
				yield(Message[T]{}, err)
				return
			}
			n := 0
			for m := range batch.Messages() {
				n++
				if v, ok := f.decode(m); ok && !yield(v, nil) {
					return
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
				yield(Message[T]{}, err)
				return
			}
			if n == 0 {
				return
			}
		}
	}
}

// Next waits up to wait for the next message. ok is false when none came
// in time (not an error); err is a failed read (NATS down or restarting:
// call again later).
func (f *Follower[T]) Next(wait time.Duration) (m Message[T], ok bool, err error) {
	for {
		msg, err := f.cons.Next(jetstream.FetchMaxWait(wait))
		switch {
		case errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			return m, false, nil
		case err != nil:
			return m, false, err
		}
		if v, ok := f.decode(msg); ok {
			return v, true, nil
		}
	}
}
