package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// Runs tells workers whether a message belongs to a run the dispatcher
// accepted and to one of its planned episodes. It reads the run-status
// bucket (schemas.BucketRuns), which only the dispatcher writes, before the
// run's first episode is published. A run's spec never changes once
// recorded, so accepted runs are cached; unknown ones are looked up again.
type Runs struct {
	kv jetstream.KeyValue

	mu    sync.Mutex
	specs map[string]schemas.RunSpec
}

// maxCachedRuns bounds the cache of accepted runs (it is cleared when full).
const maxCachedRuns = 4096

// NewRuns opens the run-status bucket.
func NewRuns(ctx context.Context, conn *Conn) (*Runs, error) {
	kv, err := conn.JS.KeyValue(ctx, schemas.BucketRuns)
	if err != nil {
		return nil, fmt.Errorf("run-status bucket %s: %w", schemas.BucketRuns, err)
	}
	return &Runs{kv: kv, specs: map[string]schemas.RunSpec{}}, nil
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
