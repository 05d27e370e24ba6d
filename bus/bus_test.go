package bus_test

import (
	"context"
	"errors"
	"log/slog"
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
	if err := bus.EnsureStreams(ctx, conn.JS, bus.StreamOptions{Memory: true}); err != nil {
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
	s, err := conn.JS.Stream(ctx, schemas.StreamScores)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages after 3 publishes with one msg id, want 1", info.State.Msgs)
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
	if _, err := conn.JS.Publish(ctx, schemas.EpisodeScored.For("r1"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return ok.Load() == 2 })
	if got := flaky.Load(); got != 3 {
		t.Fatalf("flaky handled %d times, want 3 (two naks, then success)", got)
	}
	dl, err := conn.JS.Stream(ctx, schemas.StreamDeadLetter)
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
	c, err := conn.JS.Consumer(ctx, schemas.StreamScores, "test-scores")
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
	cons, err := bus.EnsureConsumer(ctx, conn.JS, bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "giveup",
		Subject: schemas.EpisodeScored, MaxDeliver: 2, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "e9", score("e9")); err != nil {
		t.Fatal(err)
	}
	// Deliver twice without an ack; the server raises the advisory when it
	// would deliver a third time, which a waiting pull request triggers.
	for range 3 {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			_ = m.Nak()
		}
	}
	dl, err := conn.JS.Stream(ctx, schemas.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := dl.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
}
