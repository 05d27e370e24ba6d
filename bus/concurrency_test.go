package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
)

// TestConcurrencyAbove512: 600 handler slots keep 600 pull requests waiting
// on the consumer and then hold 600 messages at once. With JetStream's
// default MaxWaiting the server refuses pull requests beyond 512 (nats.go
// retries them quietly), so at most 512 wait and the rest of the slots join
// only slowly.
func TestConcurrencyAbove512(t *testing.T) {
	conn, ctx := setup(t)
	rt, err := bus.NewRouter(conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	var inflight, peak atomic.Int64
	release := make(chan struct{})
	h := func(ctx context.Context, sc schemas.Score) error {
		cur := inflight.Add(1)
		defer inflight.Add(-1)
		for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	err = bus.Handle(rt, "scores", bus.HandlerOptions{Concurrency: n, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: "test-wide", Subject: schemas.EpisodeScored}}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	c, err := bus.JetStream(conn).Consumer(ctx, schemas.StreamScores, "test-wide")
	if err != nil {
		t.Fatal(err)
	}
	var waiting int
	for deadline := time.Now().Add(20 * time.Second); waiting < n && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if info, err := c.Info(ctx); err == nil {
			waiting = info.NumWaiting
		}
	}
	if waiting != n {
		t.Fatalf("%d pull requests waiting for %d handler slots", waiting, n)
	}
	for i := range n {
		ep := fmt.Sprintf("e%d", i)
		if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), ep, score(ep)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for peak.Load() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	if got := peak.Load(); got != n {
		t.Fatalf("at most %d of %d messages were handled at once", got, n)
	}
	stop()
}

// TestEnsureConsumerKeepsMaxWaiting: JetStream cannot change MaxWaiting on
// an existing consumer; EnsureConsumer keeps the old value and still
// applies the other settings.
func TestEnsureConsumerKeepsMaxWaiting(t *testing.T) {
	conn, ctx := setup(t)
	o := bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "test-old", Subject: schemas.EpisodeScored, MaxWaiting: 512}
	if _, err := bus.EnsureConsumer(ctx, conn, o); err != nil {
		t.Fatal(err)
	}
	o.MaxWaiting, o.AckWait = 0, 7*time.Second
	c, err := bus.EnsureConsumer(ctx, conn, o)
	if err != nil {
		t.Fatalf("second EnsureConsumer: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxWaiting != 512 || info.Config.AckWait != 7*time.Second {
		t.Fatalf("max waiting %d ack wait %v, want 512 and 7s", info.Config.MaxWaiting, info.Config.AckWait)
	}
	fresh, err := bus.EnsureConsumer(ctx, conn, bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "test-new", Subject: schemas.EpisodeScored})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := fresh.Info(ctx); err != nil || fi.Config.MaxWaiting != 4096 {
		t.Fatalf("new consumer max waiting: %v %v", fi, err)
	}
}
