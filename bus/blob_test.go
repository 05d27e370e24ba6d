package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/schemas"
)

// smallServer is a real server whose max_payload is 64 KiB, so payloads of
// hundreds of KiB cross it the way megabyte trajectories cross 8 MiB.
func smallServer(t *testing.T) (*bus.Conn, context.Context) {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	conn, err := bus.Connect(ctx, ns.ClientURL(), "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return conn, ctx
}

func bigResult(ep string, n int) schemas.EpisodeResult {
	return schemas.EpisodeResult{
		Request: schemas.EpisodeRequest{RunID: "r1", EpisodeID: ep, Task: schemas.TaskView{ID: "t", Dataset: "d", Question: "q"},
			Policy: schemas.PolicySpec{Name: schemas.PolicyReference}, Options: schemas.DefaultOptions()},
		Turns:       []schemas.Turn{{Stdout: strings.Repeat("x", n) + "END"}},
		Termination: schemas.EndTurnLimit,
	}
}

// TestLargePayloadsTravelAsBlobs: a message over max_payload is published
// (it used to fail with "maximum payload exceeded") and the handler gets
// it whole; a small one travels inline.
func TestLargePayloadsTravelAsBlobs(t *testing.T) {
	conn, ctx := smallServer(t)
	rt, err := bus.NewRouter(conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan schemas.EpisodeResult, 2)
	if err := bus.Handle(rt, "results", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamResults, Durable: "blob-test", Subject: schemas.EpisodeCompleted}},
		func(_ context.Context, r schemas.EpisodeResult) error { got <- r; return nil }); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	defer stop()
	sizes := map[string]int{"small": 1000, "at-limit": conn.InlineMax() - 2000, "big": 600 << 10}
	for ep, n := range sizes {
		if err := conn.Publish(ctx, schemas.EpisodeCompleted.For("r1"), ep+"/result", bigResult(ep, n)); err != nil {
			t.Fatalf("%s (%d bytes): %v", ep, n, err)
		}
	}
	for range sizes {
		select {
		case r := <-got:
			want := sizes[r.Request.EpisodeID] + 3
			if len(r.Turns) != 1 || len(r.Turns[0].Stdout) != want || !strings.HasSuffix(r.Turns[0].Stdout, "END") {
				t.Errorf("%s: stdout of %d bytes arrived, want %d", r.Request.EpisodeID, len(r.Turns[0].Stdout), want)
			}
		case <-ctx.Done():
			t.Fatal("a result never arrived")
		}
	}
	// The big one is in the stream as a pointer, the small one inline.
	s, err := bus.JetStream(conn).Stream(ctx, schemas.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	blobbed := 0
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(bus.HeaderBlob) != "" {
			blobbed++
			if len(m.Data) != 0 {
				t.Errorf("offloaded message %d keeps a %d-byte body", seq, len(m.Data))
			}
		}
	}
	if blobbed != 1 {
		t.Errorf("%d messages offloaded, want 1 (only the one over the limit)", blobbed)
	}
}

// TestStateKVHoldsLargeValues: episode state over max_payload is stored,
// read back, updated with compare-and-set, and the replaced object deleted.
func TestStateKVHoldsLargeValues(t *testing.T) {
	conn, ctx := smallServer(t)
	kv, err := conn.StateKV(ctx, schemas.BucketEpisodes)
	if err != nil {
		t.Fatal(err)
	}
	big := func(c byte) []byte { return []byte(`"` + strings.Repeat(string(c), 300<<10) + `"`) }
	rev, err := kv.Create(ctx, "e1", big('a'))
	if err != nil {
		t.Fatalf("create a 300 KiB value: %v", err)
	}
	if _, err := kv.Update(ctx, "e1", big('b'), rev+7); err == nil {
		t.Fatal("update with a wrong revision succeeded")
	}
	rev2, err := kv.Update(ctx, "e1", big('c'), rev)
	if err != nil {
		t.Fatal(err)
	}
	v, r, err := kv.Get(ctx, "e1")
	if err != nil || r != rev2 || string(v) != string(big('c')) {
		t.Fatalf("get: %d bytes, rev %d (want %d), %v", len(v), r, rev2, err)
	}
	small := []byte(`{"x":1}`)
	if _, err := kv.Update(ctx, "e1", small, rev2); err != nil {
		t.Fatal(err)
	}
	if v, _, err := kv.Get(ctx, "e1"); err != nil || string(v) != string(small) {
		t.Fatalf("small value back: %q, %v", v, err)
	}
	obj, err := bus.JetStream(conn).ObjectStore(ctx, schemas.BucketBlobs)
	if err != nil {
		t.Fatal(err)
	}
	left, err := obj.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%d objects left behind after the value shrank, want 0: %v", len(left), left[0].Name)
	}
}

// TestOffloadedDeadLetterStaysAPointer: a handler's permanent failure on an
// offloaded message dead-letters the pointer (header, empty body), which
// a server with a small max_payload accepts, not the resolved payload.
func TestOffloadedDeadLetterStaysAPointer(t *testing.T) {
	conn, ctx := smallServer(t)
	rt, err := bus.NewRouter(conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Handle(rt, "results", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamResults, Durable: "blob-dead", Subject: schemas.EpisodeCompleted}},
		func(context.Context, schemas.EpisodeResult) error { return bus.Permanent(errors.New("no")) }); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	defer stop()
	if err := conn.Publish(ctx, schemas.EpisodeCompleted.For("r1"), "big/result", bigResult("big", 600<<10)); err != nil {
		t.Fatal(err)
	}
	s, err := bus.JetStream(conn).Stream(ctx, schemas.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	waitFor(t, 20*time.Second, func() bool {
		m, err = s.GetMsg(ctx, 1)
		return err == nil
	})
	if m.Header.Get(bus.HeaderBlob) == "" || len(m.Data) != 0 {
		t.Errorf("dead letter: blob header %q, %d-byte body; want the pointer", m.Header.Get(bus.HeaderBlob), len(m.Data))
	}
}

// TestBlobsStayInTheirWritersStore: a connection of a service
// (WithBlobService) offloads to that service's own object store and says
// so (the message's Medgym-Blob-Bucket header, the key-value pointer);
// another service's connection reads both, and leaves the object alone
// when it replaces the value (only its writer may purge that store; it
// expires with the store's TTL), while the writer deletes what it replaces.
func TestBlobsStayInTheirWritersStore(t *testing.T) {
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	connect := func(opts ...bus.ConnectOption) *bus.Conn {
		c, err := bus.Connect(ctx, ns.ClientURL(), "test", slog.New(slog.DiscardHandler), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	writer, reader := connect(bus.WithBlobService("llm-worker")), connect()
	if err := bus.EnsureStreams(ctx, reader, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	store := schemas.BlobBucket("llm-worker")
	if writer.BlobBucket() != store || reader.BlobBucket() != schemas.BucketBlobs {
		t.Fatalf("stores %s and %s, want %s and %s", writer.BlobBucket(), reader.BlobBucket(), store, schemas.BucketBlobs)
	}
	objects := func(bucket string) int {
		obj, err := bus.JetStream(reader).ObjectStore(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		list, err := obj.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		return len(list)
	}

	// A message.
	if err := writer.Publish(ctx, schemas.EpisodeCompleted.For("r1"), "big/result", bigResult("big", 300<<10)); err != nil {
		t.Fatal(err)
	}
	c, err := bus.JetStream(reader).OrderedConsumer(ctx, schemas.StreamResults, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	jm, err := c.Next()
	if err != nil {
		t.Fatal(err)
	}
	if got := jm.Headers().Get(bus.HeaderBlobBucket); got != store {
		t.Fatalf("offloaded message names store %q, want %q", got, store)
	}
	if p, err := reader.Payload(ctx, jm); err != nil || !strings.Contains(string(p), strings.Repeat("x", 300<<10)+"END") {
		t.Fatalf("another service reading the payload: %d bytes, %v", len(p), err)
	}
	// The header is the publisher's: a store that is not a blob store
	// (a key-value bucket's stream) is refused for good, not retried.
	if _, err := reader.GetBlobIn(ctx, "KV_"+schemas.BucketRuns, "x"); !bus.IsPermanent(err) {
		t.Fatalf("reading a blob of a key-value bucket: %v, want a permanent error", err)
	}

	// A key-value value.
	wkv, err := writer.StateKV(ctx, schemas.BucketEpisodes)
	if err != nil {
		t.Fatal(err)
	}
	rkv, err := reader.StateKV(ctx, schemas.BucketEpisodes)
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(`"` + strings.Repeat("a", 300<<10) + `"`)
	rev, err := wkv.Create(ctx, "e1", big)
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := rkv.Get(ctx, "e1"); err != nil || string(v) != string(big) {
		t.Fatalf("another service reading the value: %d bytes, %v", len(v), err)
	}
	before := objects(store) // the message's and the value's
	rev, err = rkv.Update(ctx, "e1", []byte(`{"x":1}`), rev)
	if err != nil {
		t.Fatal(err)
	}
	if n := objects(store); n != before {
		t.Fatalf("another service's update left %d objects in %s, want %d (not its store)", n, store, before)
	}
	if _, err := wkv.Update(ctx, "e1", big, rev); err != nil {
		t.Fatal(err)
	}
	rev++
	if _, err := wkv.Update(ctx, "e1", []byte(`{"x":2}`), rev); err != nil {
		t.Fatal(err)
	}
	if n := objects(store); n != before {
		t.Fatalf("the writer's updates left %d objects in %s, want %d (it deletes what it replaces)", n, store, before)
	}
	if n := objects(schemas.BucketBlobs); n != 0 {
		t.Fatalf("%d objects in %s, want 0", n, schemas.BucketBlobs)
	}
}
