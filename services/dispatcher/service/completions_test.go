package service

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/dispatcher/internal/dispatch"
)

// TestCompletionsConcurrentMarks: eight writers mark the same episodes of
// a run spanning three chunks at once, as competing dispatchers would;
// each episode is reported fresh exactly once, and the counts over a
// published prefix match what was marked.
func TestCompletionsConcurrentMarks(t *testing.T) {
	ctx := context.Background()
	conn, err := bus.Connect(ctx, bustest.StartJetStream(t), "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn.JS, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	kv, err := conn.JS.KeyValue(ctx, schemas.BucketCompletions)
	if err != nil {
		t.Fatal(err)
	}
	c := completions{kv}
	n := 2*dispatch.ChunkBits + 10
	var marked []int // every 97th episode, and both sides of each chunk border
	for i := 0; i < n; i += 97 {
		marked = append(marked, i)
	}
	marked = append(marked, dispatch.ChunkBits-1, dispatch.ChunkBits, 2*dispatch.ChunkBits, n-1)
	slices.Sort(marked)
	marked = slices.Compact(marked)
	var fresh atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, i := range marked {
				ok, err := c.mark(ctx, "big", i)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					fresh.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if int(fresh.Load()) != len(marked) {
		t.Fatalf("%d marks reported fresh, want %d (one per episode)", fresh.Load(), len(marked))
	}
	p := newProgress(n)
	for _, published := range []int{0, 1, dispatch.ChunkBits, dispatch.ChunkBits + 1, n} {
		want := 0
		for _, i := range marked {
			if i < published {
				want++
			}
		}
		got, err := p.count(ctx, c, "big", published)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("count of the first %d episodes = %d, want %d", published, got, want)
		}
	}
	if got, _ := newProgress(n).count(ctx, c, "other", n); got != 0 {
		t.Fatalf("another run counts %d", got)
	}
	// A full chunk is read once: the count of a prefix of it is the prefix,
	// and it is not read again.
	full := make([]byte, dispatch.ChunkBits/8)
	for i := range full {
		full[i] = 0xff
	}
	if _, err := kv.Put(ctx, chunkKey("full", 0), full); err != nil {
		t.Fatal(err)
	}
	pf := newProgress(n)
	for range 2 {
		if got, err := pf.count(ctx, c, "full", 100); err != nil || got != 100 {
			t.Fatalf("count of a full chunk's first 100 = %d, %v", got, err)
		}
		if err := kv.Delete(ctx, chunkKey("full", 0)); err != nil {
			t.Fatal(err)
		}
	}
}
