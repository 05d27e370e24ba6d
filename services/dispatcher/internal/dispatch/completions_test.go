package dispatch

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestCompletionsConcurrentMarks: eight writers (on the in-memory store,
// whose compare-and-set they contend on; the service test covers the bucket) mark the same episodes of
// a run spanning three chunks at once, as competing dispatchers would;
// each episode is reported fresh exactly once, and the counts over a
// published prefix match what was marked.
func TestCompletionsConcurrentMarks(t *testing.T) {
	ctx := context.Background()
	kv := memEpisodes{newMemKV[[]byte]()}
	c := completions{kv}
	n := 2*ChunkBits + 10
	var marked []int // every 97th episode, and both sides of each chunk border
	for i := 0; i < n; i += 97 {
		marked = append(marked, i)
	}
	marked = append(marked, ChunkBits-1, ChunkBits, 2*ChunkBits, n-1)
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
	for _, published := range []int{0, 1, ChunkBits, ChunkBits + 1, n} {
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
	full := make([]byte, ChunkBits/8)
	for i := range full {
		full[i] = 0xff
	}
	if _, err := kv.Create(ctx, ChunkKey("full", 0), full); err != nil {
		t.Fatal(err)
	}
	pf := newProgress(n)
	for range 2 {
		if got, err := pf.count(ctx, c, "full", 100); err != nil || got != 100 {
			t.Fatalf("count of a full chunk's first 100 = %d, %v", got, err)
		}
		kv.mu.Lock()
		delete(kv.recs, ChunkKey("full", 0))
		kv.mu.Unlock()
	}
}
