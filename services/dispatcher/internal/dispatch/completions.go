package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// completions records which planned episodes of a run are scored, as a
// bitmap in chunks (see ChunkBits) in the episode store. Setting a bit is a
// compare-and-set on its chunk, so two dispatchers marking episodes of the
// same chunk never lose one, and an episode is counted once however often
// its score arrives.
type completions struct{ store EpisodeStore }

// ChunkKey names chunk c of run's completion bitmap in the episode store.
func ChunkKey(run string, c int) string { return run + "." + strconv.Itoa(c) }

// casTries bounds the compare-and-set attempts of one mark; more conflicts
// than that return an error, and JetStream redelivers the score later.
const casTries = 16

// mark records episode i of run as scored and reports whether it was not
// recorded before.
func (c completions) mark(ctx context.Context, run string, i int) (bool, error) {
	key := ChunkKey(run, i/ChunkBits)
	for range casTries {
		chunk, rev, err := c.store.Get(ctx, key)
		switch {
		case errors.Is(err, ErrNotFound):
			chunk, rev = nil, 0
		case err != nil:
			return false, fmt.Errorf("read completions %s: %w", key, err)
		}
		chunk, fresh := Mark(chunk, i)
		if !fresh {
			return false, nil
		}
		if rev == 0 {
			_, err = c.store.Create(ctx, key, chunk)
		} else {
			_, err = c.store.Update(ctx, key, chunk, rev)
		}
		if errors.Is(err, ErrConflict) {
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
	p := &progress{n: n, full: make([]int, Chunks(n))}
	for i := range p.full {
		p.full[i] = -1
	}
	return p
}

// count returns the scored episodes among the first published ones.
func (p *progress) count(ctx context.Context, c completions, run string, published int) (int, error) {
	done := 0
	for ch := range p.full {
		lo := ch * ChunkBits
		if lo >= published {
			break
		}
		if p.full[ch] >= 0 {
			done += min(p.full[ch], published-lo) // every bit is set
			continue
		}
		chunk, _, err := c.store.Get(ctx, ChunkKey(run, ch))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read completions of run %s: %w", run, err)
		}
		all := ChunkLen(p.n, ch)
		if n := Count(chunk, all); n == all {
			p.full[ch] = n
		}
		done += Count(chunk, min(all, published-lo))
	}
	return done, nil
}
