package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

func setup(t *testing.T) (*bus.Conn, context.Context) {
	t.Helper()
	url := bustest.StartJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	conn, err := bus.Connect(ctx, url, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{Memory: true}); err != nil {
		t.Fatal(err)
	}
	return conn, ctx
}

func score(ep string) schemas.Score {
	return schemas.Score{RunID: "r1", EpisodeID: ep, Outcome: schemas.OutcomeCorrect, Reward: 1}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runRouter runs rt until stop, which fails the test if Run failed.
func runRouter(t *testing.T, ctx context.Context, rt *bus.Router) (stop func()) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(rctx) }()
	<-rt.Running()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestPublishDedupesByMsgID(t *testing.T) {
	conn, ctx := setup(t)
	for range 3 {
		if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "e1/scored", score("e1")); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamMsgs(t, ctx, conn, schemas.StreamScores); n != 1 {
		t.Fatalf("stream holds %d messages after 3 publishes with one msg id, want 1", n)
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "x", schemas.Score{}); !bus.IsPermanent(err) {
		t.Fatalf("publishing an invalid message: err = %v, want a permanent error", err)
	}
}

func TestHandlerAckRetryAndDeadLetter(t *testing.T) {
	conn, ctx := setup(t)
	rt, err := bus.NewRouter(conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var ok, flaky, calls atomic.Int32
	h := func(ctx context.Context, sc schemas.Score) error {
		calls.Add(1)
		switch sc.EpisodeID {
		case "flaky":
			if flaky.Add(1) < 3 {
				return errors.New("transient")
			}
		case "bad":
			return bus.Permanent(errors.New("cannot ever handle this"))
		}
		ok.Add(1)
		return nil
	}
	err = bus.Handle(rt, "scores", bus.HandlerOptions{Concurrency: 2, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: "test-scores", Subject: schemas.EpisodeScored, AckWait: 3 * time.Second}}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	for _, ep := range []string{"good", "flaky", "bad"} {
		if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), ep, score(ep)); err != nil {
			t.Fatal(err)
		}
	}
	// An undecodable payload is junk: acked, not a dead letter.
	if _, err := bus.JetStream(conn).Publish(ctx, schemas.EpisodeScored.For("r1"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return ok.Load() == 2 })
	if got := flaky.Load(); got != 3 {
		t.Fatalf("flaky handled %d times, want 3 (two naks, then success)", got)
	}
	dl, err := bus.JetStream(conn).Stream(ctx, schemas.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := dl.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	m, err := dl.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(bus.HeaderDeadReason) == "" || m.Header.Get(bus.HeaderDeadSubject) != schemas.EpisodeScored.For("r1") {
		t.Fatalf("dead letter headers = %v, want reason and original subject", m.Header)
	}
	// Everything was acked: nothing pending on the consumer.
	c, err := bus.JetStream(conn).Consumer(ctx, schemas.StreamScores, "test-scores")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		ci, err := c.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
	})
	stop()
}

func TestMaxDeliveriesBecomeDeadLetters(t *testing.T) {
	conn, ctx := setup(t)
	stopWatch, err := bus.WatchMaxDeliveries(ctx, conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch()
	cons, err := bus.EnsureConsumer(ctx, conn, bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "giveup",
		Subject: schemas.EpisodeScored, MaxDeliver: 2, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "e9", score("e9")); err != nil {
		t.Fatal(err)
	}
	// Deliver twice without an ack; the server raises the advisory when it
	// would deliver a third time, which a waiting pull request triggers.
	if err := bustest.NakUntilGivenUp(cons, 2); err != nil {
		t.Fatal(err)
	}
	dl, err := bus.JetStream(conn).Stream(ctx, schemas.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := dl.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
}

// TestConsumerStates: the stall report names each durable consumer with
// what it holds: a published, undelivered score is pending 1 on its
// consumer and nothing is waiting to pull it.
func TestConsumerStates(t *testing.T) {
	conn, ctx := setup(t)
	if _, err := bus.EnsureConsumer(ctx, conn, bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "states", Subject: schemas.EpisodeScored}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "e1/scored", score("e1")); err != nil {
		t.Fatal(err)
	}
	states, err := conn.ConsumerStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := schemas.StreamScores + "/states: pending 1, ack pending 0, redelivered 0, waiting pulls 0"
	if !slices.ContainsFunc(states, func(s string) bool { return strings.HasPrefix(s, want) }) {
		t.Fatalf("consumer states %q, want a line starting %q", states, want)
	}
}

// TestSubscriberRenewsIteratorAfterReconnect: when the connection's
// reconnect count moves, each slot replaces its pull iterator within its
// check interval, and the new one receives what is published next (a
// fresh pull on the server, whatever the old iterator's accounting said;
// see subscriber.Subscribe). Without a reconnect nothing is renewed.
func TestSubscriberRenewsIteratorAfterReconnect(t *testing.T) {
	conn, ctx := setup(t)
	cons, err := bus.EnsureConsumer(ctx, conn, bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "renew", Subject: schemas.EpisodeScored})
	if err != nil {
		t.Fatal(err)
	}
	var gen atomic.Uint64
	sub := bus.NewSubscriber(cons, gen.Load, 50*time.Millisecond)
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "scores")
	if err != nil {
		t.Fatal(err)
	}
	receive := func(ep string) {
		t.Helper()
		if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), ep+"/scored", score(ep)); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-msgs:
			if !strings.Contains(string(m.Payload), ep) {
				t.Fatalf("got %s, want the score of %s", m.Payload, ep)
			}
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("score of %s not received", ep)
		}
	}
	receive("e1")
	time.Sleep(200 * time.Millisecond) // four checks with no reconnect
	if n := sub.Renewals(); n != 0 {
		t.Fatalf("%d renewals without a reconnect, want 0", n)
	}
	gen.Add(1)
	waitFor(t, 5*time.Second, func() bool { return sub.Renewals() == 1 })
	receive("e2")
	gen.Add(1)
	waitFor(t, 5*time.Second, func() bool { return sub.Renewals() == 2 })
	receive("e3")
}

// serverEndedConsumer is a real consumer whose first pull iterator is
// ended by a terminal status at its first Next, as the server does to a
// parked pull when the consumer is deleted (then re-created by a
// provisioner, or across a restart) or the request is refused.
type serverEndedConsumer struct {
	jetstream.Consumer
	opened atomic.Int32
}

func (c *serverEndedConsumer) Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	it, err := c.Consumer.Messages(opts...)
	if err != nil || c.opened.Add(1) > 1 {
		return it, err
	}
	return &endedIterator{MessagesContext: it}, nil
}

type endedIterator struct {
	jetstream.MessagesContext
	ended bool
}

func (it *endedIterator) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	if !it.ended {
		it.ended = true
		it.Stop()
		return nil, jetstream.ErrConsumerDeleted
	}
	return it.MessagesContext.Next(opts...)
}

// TestSubscriberSurvivesServerEndedPull: when the server ends a slot's
// pull iterator itself (a terminal status), the slot opens a new one
// instead of ending, so the handler keeps receiving: a slot that ended
// would leave its messages unpulled for good (all of a worker's slots, and
// a run waits forever).
func TestSubscriberSurvivesServerEndedPull(t *testing.T) {
	conn, ctx := setup(t)
	cons, err := bus.EnsureConsumer(ctx, conn, bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "ended", Subject: schemas.EpisodeScored})
	if err != nil {
		t.Fatal(err)
	}
	ended := &serverEndedConsumer{Consumer: cons}
	var gen atomic.Uint64 // no reconnect: the server alone ends the iterator
	sub := bus.NewSubscriber(ended, gen.Load, 50*time.Millisecond)
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "scores")
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "e1/scored", score("e1")); err != nil {
		t.Fatal(err)
	}
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("the subscription ended when the server ended its pull iterator")
		}
		if !strings.Contains(string(m.Payload), "e1") {
			t.Fatalf("got %s, want the score of e1", m.Payload)
		}
		m.Ack()
	case <-time.After(15 * time.Second):
		t.Fatal("score of e1 not received")
	}
	if n := ended.opened.Load(); n != 2 || sub.Renewals() != 1 {
		t.Fatalf("%d iterators opened, %d renewals; want 2 and 1", n, sub.Renewals())
	}
}
