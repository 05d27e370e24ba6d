package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// ErrInconclusive is returned by EpisodesInPlay when it cannot tell now:
// dead letters wait for the dispatcher, which will account for their
// episodes, or a look would read more than maxInPlayScan messages.
var ErrInconclusive = errors.New("episodes in play: inconclusive")

// pipelineStages are the streams an episode's messages pass through and
// the durable consumer that takes each off, in the pipeline's order.
var pipelineStages = []struct{ stream, durable string }{
	{schemas.StreamEpisodes, schemas.DurableLLMEpisodes},
	{schemas.StreamActions, schemas.DurableSandboxActions},
	{schemas.StreamObservations, schemas.DurableVerifierObs},
	{schemas.StreamChecks, schemas.DurableLLMChecks},
	{schemas.StreamResults, schemas.DurableVerifierResults},
	{schemas.StreamScores, schemas.DurableDispatcherScores},
}

// EpisodesInPlay returns the ids of run's episodes that have a message
// some pipeline consumer has not acked yet (above its ack floor: waiting,
// being handled, or acked out of order), or that published one while it
// looked. An episode of the run it does not name has no message in play:
// each was acked or ran out of deliveries (JetStream moves the ack floor
// past those; the dead-letter copy may have failed), or was discarded.
//
// A delivered message above the floor counts as in play while the
// consumer has any delivery unacked (see below), so an episode whose
// message ran out of deliveries may be named until the consumer is idle
// at a look.
//
// It reads from stored state only, the streams' sequences and the
// consumers' ack floors, so it holds across restarts. It is consistent for
// an episode alive all along: every step publishes the next message
// before acking the one it took, and it reads each stream's sequence
// before looking and every message published since after, so an episode
// moving between streams while it looks is still found. The caller reads
// the scores after it returns (a score is counted before it is acked).
// While dead letters wait to be handled, or when a stage would take more
// than maxInPlayScan reads, it returns ErrInconclusive. A look is bounded
// by bulkTimeout (see requestTimeout): one that takes longer fails, and a
// later one decides.
func (c *Conn) EpisodesInPlay(ctx context.Context, run string) (map[string]bool, error) {
	ctx, cancel := bounded(ctx, bulkTimeout)
	defer cancel()
	if err := c.deadLettersPending(ctx); err != nil {
		return nil, err
	}
	found := map[string]bool{}
	start := make([]uint64, len(pipelineStages))
	for i, st := range pipelineStages {
		s, err := c.js.Stream(ctx, st.stream)
		if err != nil {
			return nil, fmt.Errorf("episodes in play: stream %s: %w", st.stream, err)
		}
		start[i] = s.CachedInfo().State.LastSeq
		cons, err := c.js.Consumer(ctx, st.stream, st.durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			// No service of this stage ever ran: whatever the stream
			// holds waits for it.
			if err := c.scanEpisodes(ctx, s, st.stream, run, 1, found); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("episodes in play: consumer %s: %w", st.durable, err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("episodes in play: consumer %s: %w", st.durable, err)
		}
		// Above the ack floor, unless nothing delivered waits for an
		// ack: JetStream does not always move the floor past a message
		// that ran out of deliveries while later ones are unacked, so a
		// delivered message above it may be done. Then the look is
		// conservative (it counts as in play) until the consumer has no
		// ack pending at a look, or its floor moves.
		from := info.AckFloor.Stream + 1
		if info.NumAckPending == 0 {
			from = max(from, info.Delivered.Stream+1)
		}
		if err := c.scanEpisodes(ctx, s, st.stream, run, from, found); err != nil {
			return nil, err
		}
	}
	// What the run published while this looked.
	for i, st := range pipelineStages {
		s, err := c.js.Stream(ctx, st.stream)
		if err != nil {
			return nil, fmt.Errorf("episodes in play: stream %s: %w", st.stream, err)
		}
		if s.CachedInfo().State.LastSeq > start[i] {
			if err := c.scanEpisodes(ctx, s, st.stream, run, start[i]+1, found); err != nil {
				return nil, err
			}
		}
	}
	if err := c.deadLettersPending(ctx); err != nil {
		return nil, err
	}
	return found, nil
}

// deadLettersPending returns ErrInconclusive while the dispatcher's
// dead-letter consumer has messages to handle.
func (c *Conn) deadLettersPending(ctx context.Context) error {
	cons, err := c.js.Consumer(ctx, schemas.StreamDeadLetter, schemas.DurableDispatcherDead)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("episodes in play: dead letters: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("episodes in play: dead letters: %w", err)
	}
	if info.NumPending > 0 || info.NumAckPending > 0 {
		return fmt.Errorf("%w: dead letters pending (%d waiting, %d being handled)", ErrInconclusive, info.NumPending, info.NumAckPending)
	}
	return nil
}

// maxInPlayScan bounds the messages one scan reads: each is a round trip
// that returns the whole message.
var maxInPlayScan = 10_000

// scanEpisodes adds the episodes of run's messages in s from sequence
// from on to found. It reads them one by one with the stream's message
// get (next on the run's subject), which a service's NATS user may do
// without creating consumers on another service's stream; the messages
// above the floors are those in flight, a bounded number.
func (c *Conn) scanEpisodes(ctx context.Context, s jetstream.Stream, stream, run string, from uint64, found map[string]bool) error {
	subject := schemas.StreamSubjects[stream].For(run)
	for seq, n := max(from, 1), 0; ; n++ {
		if n == maxInPlayScan {
			// A floor left far behind (or a stage that never ran): the
			// look would cost more than it tells; a later pass decides.
			return fmt.Errorf("%w: more than %d messages of run %s in %s to read", ErrInconclusive, maxInPlayScan, run, stream)
		}
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("episodes in play: scan %s from %d: %w", stream, seq, err)
		}
		if ep := episodeOfMsgID(run, m.Header.Get(jetstream.MsgIDHeader)); ep != "" {
			found[ep] = true
		}
		seq = m.Sequence + 1
	}
}

// episodeOfMsgID finds run's episode id among the parts of a message id
// (schemas.MsgID: "<run>/<episode>/<attempt>" for a request,
// "<episode>/<turn>/action" and the like for the others).
func episodeOfMsgID(run, msgID string) string {
	for part := range strings.SplitSeq(msgID, "/") {
		if strings.HasPrefix(part, run+"--") {
			return part
		}
	}
	return ""
}
