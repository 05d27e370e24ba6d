package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/services/dispatcher/internal/dispatch"
)

// completions records which planned episodes of a run are scored, as a
// bitmap in chunks (see dispatch.ChunkBits) in the completions bucket.
// Setting a bit is a compare-and-set on its chunk, so two dispatchers
// marking episodes of the same chunk never lose one, and an episode is
// counted once however often its score arrives.
type completions struct{ kv jetstream.KeyValue }

func chunkKey(run string, c int) string { return run + "." + strconv.Itoa(c) }

// casTries bounds the compare-and-set attempts of one mark; more conflicts
// than that return an error, and JetStream redelivers the score later.
const casTries = 16

// mark records episode i of run as scored and reports whether it was not
// recorded before.
func (c completions) mark(ctx context.Context, run string, i int) (bool, error) {
	key := chunkKey(run, i/dispatch.ChunkBits)
	for range casTries {
		var (
			chunk []byte
			rev   uint64
		)
		e, err := c.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return false, fmt.Errorf("read completions %s: %w", key, err)
		default:
			chunk, rev = e.Value(), e.Revision()
		}
		chunk, fresh := dispatch.Mark(chunk, i)
		if !fresh {
			return false, nil
		}
		if rev == 0 {
			_, err = c.kv.Create(ctx, key, chunk)
		} else {
			_, err = c.kv.Update(ctx, key, chunk, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue // another score of this chunk got there first: re-read
		}
		if err != nil {
			return false, fmt.Errorf("record completion %s: %w", key, err)
		}
		return true, nil
	}
	return false, fmt.Errorf("record completion %s: %d conflicting updates", key, casTries)
}

// progress counts a run's scored episodes. It remembers the chunks found
// full, which never change again, so a long run re-reads only the chunks
// still filling; its memory is one int per 8,192 episodes.
type progress struct {
	n    int   // planned episodes
	full []int // chunk → its count once full, else -1
}

func newProgress(n int) *progress {
	p := &progress{n: n, full: make([]int, dispatch.Chunks(n))}
	for i := range p.full {
		p.full[i] = -1
	}
	return p
}

// count returns the scored episodes among the first published ones.
func (p *progress) count(ctx context.Context, c completions, run string, published int) (int, error) {
	done := 0
	for ch := range p.full {
		lo := ch * dispatch.ChunkBits
		if lo >= published {
			break
		}
		if p.full[ch] >= 0 {
			done += min(p.full[ch], published-lo) // every bit is set
			continue
		}
		e, err := c.kv.Get(ctx, chunkKey(run, ch))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read completions of run %s: %w", run, err)
		}
		all := dispatch.ChunkLen(p.n, ch)
		if n := dispatch.Count(e.Value(), all); n == all {
			p.full[ch] = n
		}
		done += dispatch.Count(e.Value(), min(all, published-lo))
	}
	return done, nil
}
