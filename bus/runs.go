package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// Runs tells workers whether a message belongs to a run the dispatcher
// accepted and to one of its planned episodes. It reads the run-status
// bucket (schemas.BucketRuns): the dispatcher records a run there before
// its first episode is published (the env server records its own runs,
// and medgym cancel sets a run's cancel mode). A run's spec never changes once
// recorded, so accepted runs are cached; unknown ones are looked up again.
type Runs struct {
	kv jetstream.KeyValue

	mu    sync.Mutex
	specs map[string]schemas.RunSpec
	drops map[string]dropSeen
}

// dropSeen is a run's cancel mode as read at a time.
type dropSeen struct {
	dropped bool
	at      time.Time
}

// DropCheckEvery is how long Dropped trusts a run's status it read
// before it reads it again: a dropped run's episodes stop within about
// this long of their next turn.
const DropCheckEvery = time.Second

// maxCachedRuns bounds the cache of accepted runs (it is cleared when full).
const maxCachedRuns = 4096

// NewRuns opens the run-status bucket.
func NewRuns(ctx context.Context, conn *Conn) (*Runs, error) {
	kv, err := conn.js.KeyValue(ctx, schemas.BucketRuns)
	if err != nil {
		return nil, fmt.Errorf("run-status bucket %s: %w", schemas.BucketRuns, err)
	}
	return &Runs{kv: boundedKV{kv}, specs: map[string]schemas.RunSpec{}, drops: map[string]dropSeen{}}, nil
}

// Admit returns nil when c names an accepted run and one of its planned
// episodes (schemas.RunSpec.Admits); Junk (JunkUnknownRun or
// JunkUnknownEpisode) when it does not, so the handler acks, counts and
// drops the message; any other error when the bucket cannot be read, so
// the message is retried.
func (r *Runs) Admit(ctx context.Context, c schemas.EpisodeClaim) error {
	spec, err := r.spec(ctx, c.RunID)
	if err != nil {
		return err
	}
	if err := spec.Admits(c); err != nil {
		return Junk(JunkUnknownEpisode, err)
	}
	return nil
}

// Dropped reports whether run runID was cancelled with `medgym cancel
// --drop` (RunStatus.Cancel is CancelDrop): its episodes in flight stop at
// their next turn. The status is read at most once per DropCheckEvery per
// run; an error means it could not be read (the caller retries).
func (r *Runs) Dropped(ctx context.Context, runID string) (bool, error) {
	r.mu.Lock()
	d, ok := r.drops[runID]
	r.mu.Unlock()
	if ok && (d.dropped || time.Since(d.at) < DropCheckEvery) {
		return d.dropped, nil // a drop is never undone
	}
	e, err := r.kv.Get(ctx, runID)
	if err != nil {
		return false, fmt.Errorf("read run status %s: %w", runID, err)
	}
	var st schemas.RunStatus
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return false, fmt.Errorf("decode run status %s: %w", runID, err)
	}
	d = dropSeen{dropped: st.Cancel == schemas.CancelDrop, at: time.Now()}
	r.mu.Lock()
	if len(r.drops) >= maxCachedRuns {
		clear(r.drops)
	}
	r.drops[runID] = d
	r.mu.Unlock()
	return d.dropped, nil
}

func (r *Runs) spec(ctx context.Context, runID string) (schemas.RunSpec, error) {
	r.mu.Lock()
	spec, ok := r.specs[runID]
	r.mu.Unlock()
	if ok {
		return spec, nil
	}
	if !schemas.ValidToken(runID) {
		return spec, Junkf(JunkUnknownRun, "run id %q is not a valid token", runID)
	}
	e, err := r.kv.Get(ctx, runID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return spec, Junkf(JunkUnknownRun, "unknown run %s", runID)
	}
	if err != nil {
		return spec, fmt.Errorf("look up run %s: %w", runID, err)
	}
	var st schemas.RunStatus
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return spec, fmt.Errorf("decode run status %s: %w", runID, err)
	}
	if st.Error != "" {
		return spec, Junkf(JunkUnknownRun, "run %s was rejected (%s): it has no episodes", runID, st.Error)
	}
	r.mu.Lock()
	if len(r.specs) >= maxCachedRuns {
		clear(r.specs)
	}
	r.specs[runID] = st.Spec
	r.mu.Unlock()
	return st.Spec, nil
}
