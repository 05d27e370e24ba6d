package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/schemas"
)

type ping struct {
	N int `json:"n"`
}

func (ping) Validate() error { return nil }

// smallStore starts an embedded server whose file store holds maxStore
// bytes and connects to it.
func smallStore(t *testing.T, ctx context.Context, maxStore int64) (*bus.Conn, string) {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), MaxFileStore: maxStore})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	conn, err := bus.Connect(ctx, ns.ClientURL(), "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn, ns.ClientURL()
}

// TestHandlerRidesOutFullStore: a handler whose publish JetStream refuses
// for a full store is retried in place, counted, without spending the
// message's deliveries (two here: naked, it would have run out and been
// lost, its dead letter refused too); once space is freed its message
// goes through.
func TestHandlerRidesOutFullStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, url := smallStore(t, ctx, 16<<20)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{DeadLetterMaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, schemas.ActionRequested.For("r"), "in", ping{1}); err != nil {
		t.Fatal(err)
	}
	_, free, err := bustest.FillStore(ctx, url, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, schemas.ActionRequested.For("r"), "in2", ping{2}); !bus.IsStorageFull(err) {
		t.Fatalf("publish to a full store: %v, want a storage-full error", err)
	}
	rt, err := bus.NewRouter(conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rt.Metrics = bus.NewMetrics()
	bus.SetStorageRetry(rt, 20*time.Millisecond, 100*time.Millisecond)
	if err := bus.Handle(rt, "h", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamActions, Durable: "h", Subject: schemas.ActionRequested, MaxDeliver: 2, AckWait: 2 * time.Second}},
		func(ctx context.Context, p ping) error {
			return conn.Publish(ctx, schemas.ObservationProduced.For("r"), "out", p)
		}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = rt.Run(rctx) }()
	for rt.Metrics.StorageFull("h") < 10 {
		select {
		case <-ctx.Done():
			t.Fatal("the handler never met the full store")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := free(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := conn.StreamCount(ctx, schemas.StreamObservations)
		if err == nil && n == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the handler's message never went through after the store was freed (%d, %v)", n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if n, _ := conn.StreamCount(ctx, schemas.StreamDeadLetter); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// TestEpisodesInPlay: an episode's message waiting or delivered and not
// acked is in play; one acked, or one that ran out of deliveries (once
// the consumer has nothing unacked), is not;
// other runs' episodes are not named; pending dead letters make the look
// inconclusive.
func TestEpisodesInPlay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _ := smallStore(t, ctx, 0)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []bus.ConsumerOptions{
		{Stream: schemas.StreamEpisodes, Durable: schemas.DurableLLMEpisodes, Subject: schemas.EpisodeRequested},
		{Stream: schemas.StreamActions, Durable: schemas.DurableSandboxActions, Subject: schemas.ActionRequested, MaxDeliver: 1},
	} {
		if _, err := bus.EnsureConsumer(ctx, conn, c); err != nil {
			t.Fatal(err)
		}
	}
	pub := func(subject, id string) {
		t.Helper()
		if err := conn.Publish(ctx, subject, id, ping{}); err != nil {
			t.Fatal(err)
		}
	}
	pub(schemas.EpisodeRequested.For("r"), schemas.MsgID("r", "r--a-k0", 0))
	pub(schemas.EpisodeRequested.For("q"), schemas.MsgID("q", "q--x-k0", 0))
	for _, ep := range []string{"r--b-k0", "r--c-k0", "r--d-k0"} {
		pub(schemas.ActionRequested.For("r"), schemas.MsgID(ep, 0, "action"))
	}
	cons, err := bus.JetStream(conn).Consumer(ctx, schemas.StreamActions, schemas.DurableSandboxActions)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	var d jetstream.Msg
	for m := range batch.Messages() {
		got++
		switch id := m.Headers().Get(jetstream.MsgIDHeader); {
		case strings.HasPrefix(id, "r--b-"):
			_ = m.DoubleAck(ctx)
		case strings.HasPrefix(id, "r--c-"):
			_ = m.Nak() // its one delivery is spent
		default:
			d = m
		}
	}
	if got != 3 {
		t.Fatalf("fetched %d actions", got)
	}
	// A later pull finds c out of deliveries: JetStream drops it (acks
	// are handled asynchronously: pull until it has).
	for {
		if b, err := cons.FetchNoWait(1); err == nil {
			for range b.Messages() {
				t.Fatal("an action was redelivered")
			}
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("c never ran out of deliveries: %+v", info)
		case <-time.After(20 * time.Millisecond):
		}
	}
	inPlay := func(want ...string) {
		t.Helper()
		got, err := conn.EpisodesInPlay(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, want) {
			t.Fatalf("in play %v, want %v", ids, want)
		}
	}
	// While d waits for its ack, c (above the ack floor) may still count.
	if got, err := conn.EpisodesInPlay(ctx, "r"); err != nil || !got["r--a-k0"] || !got["r--d-k0"] || got["r--b-k0"] {
		t.Fatalf("in play %v, %v", got, err)
	}
	// Once d is acked, the consumer has nothing unacked: c is known done.
	if err := d.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	inPlay("r--a-k0")

	if _, err := bus.EnsureConsumer(ctx, conn, bus.ConsumerOptions{Stream: schemas.StreamDeadLetter,
		Durable: schemas.DurableDispatcherDead, Subject: schemas.DeadLetter}); err != nil {
		t.Fatal(err)
	}
	pub(schemas.DeadLetter.For("poison"), "dead/1")
	if _, err := conn.EpisodesInPlay(ctx, "r"); !errors.Is(err, bus.ErrInconclusive) {
		t.Fatalf("with a dead letter pending: %v, want ErrInconclusive", err)
	}
}

// TestEnsureStreamsExplainsSmallStore: a server whose store cannot hold
// the streams' reservations fails EnsureStreams with what it offers, what
// medgym reserves and where to read about it.
func TestEnsureStreamsExplainsSmallStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _ := smallStore(t, ctx, 256<<20)
	err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{})
	if err == nil {
		t.Fatal("1 GiB of dead letters fit in a 256 MiB store")
	}
	for _, want := range []string{"JetStream offers 268435456 bytes of file storage", "reserve 1073741824", "max_file_store", "deploy/README.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{DeadLetterMaxBytes: 64 << 20}); err != nil {
		t.Fatalf("with a reservation that fits: %v", err)
	}
}

// TestEnsureStreamsRemovesLeftoverProbe: a storage probe stream left by a
// process stopped in the middle of its search (it reserves what it
// probed) is removed by the next explanation, which then tells what the
// store offers without it.
func TestEnsureStreamsRemovesLeftoverProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _ := smallStore(t, ctx, 256<<20)
	js := bus.JetStream(conn)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MEDGYM_STORAGE_PROBE", Subjects: []string{"_medgym.storage.probe"},
		Storage: jetstream.FileStorage, MaxBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{})
	if want := "JetStream offers 268435456 bytes of file storage"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v does not say %q", err, want)
	}
	if _, err := js.Stream(ctx, "MEDGYM_STORAGE_PROBE"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the probe stream is left: %v", err)
	}
}

// TestIsStorageFull: only JetStream's answers count, wrapped or not.
func TestIsStorageFull(t *testing.T) {
	for _, tc := range []struct {
		err  error
		full bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}, true},
		{fmt.Errorf("publish x: %w", &jetstream.APIError{Code: 500, ErrorCode: 10047}), true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10999, Description: "write err: no space left on device"}, true},
		{&jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}, false},
		{errors.New("sandbox: write /tmp/work/x: no space left on device"), false},
		{nil, false},
	} {
		if got := bus.IsStorageFull(tc.err); got != tc.full {
			t.Errorf("IsStorageFull(%v) = %v, want %v", tc.err, got, tc.full)
		}
	}
}

// TestEpisodesInPlayBounded: a look that would read more than its bound
// of messages (a floor left far behind, a stage that never ran) is
// inconclusive, so a reconciliation pass costs at most that many reads a
// stage instead of every message of the run since the floor.
func TestEpisodesInPlayBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _ := smallStore(t, ctx, 0)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{"r--a-k0", "r--b-k0", "r--c-k0", "r--d-k0"} {
		if err := conn.Publish(ctx, schemas.EpisodeRequested.For("r"), schemas.MsgID("r", ep, 0), ping{}); err != nil {
			t.Fatal(err)
		}
	}
	// No llm-worker consumer: the whole stream waits for one.
	if got, err := conn.EpisodesInPlay(ctx, "r"); err != nil || len(got) != 4 {
		t.Fatalf("within the bound: %v, %v", got, err)
	}
	bus.SetMaxInPlayScan(t, 3)
	if got, err := conn.EpisodesInPlay(ctx, "r"); !errors.Is(err, bus.ErrInconclusive) {
		t.Fatalf("past the bound: %v, %v; want ErrInconclusive", got, err)
	}
}
