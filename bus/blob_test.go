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
	if err := bus.EnsureStreams(ctx, conn.JS, bus.StreamOptions{}); err != nil {
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
	s, err := conn.JS.Stream(ctx, schemas.StreamResults)
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
	obj, err := conn.JS.ObjectStore(ctx, schemas.BucketBlobs)
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
	s, err := conn.JS.Stream(ctx, schemas.StreamDeadLetter)
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
