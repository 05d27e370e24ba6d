package dispatch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/medgym/medgym/schemas"
)

// memKV is an in-memory key-value store with the revision semantics the
// stores declare: Create fails with ErrConflict on a taken key, Update on a
// stale revision; Get fails with ErrNotFound. Revisions grow over the
// whole store, as in a JetStream bucket.
type memKV[T any] struct {
	mu   sync.Mutex
	last uint64
	recs map[string]memRec[T]
	// fail, when set, is returned by every operation (a store that is down).
	fail error
}

type memRec[T any] struct {
	v   T
	rev uint64
}

func newMemKV[T any]() *memKV[T] { return &memKV[T]{recs: map[string]memRec[T]{}} }

func (m *memKV[T]) get(key string) (T, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var zero T
	if m.fail != nil {
		return zero, 0, m.fail
	}
	r, ok := m.recs[key]
	if !ok {
		return zero, 0, fmt.Errorf("key %s: %w", key, ErrNotFound)
	}
	return r.v, r.rev, nil
}

func (m *memKV[T]) put(key string, v T, rev uint64, create bool) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return 0, m.fail
	}
	r, ok := m.recs[key]
	switch {
	case create && ok:
		return 0, fmt.Errorf("create %s: %w", key, ErrConflict)
	case !create && (!ok || r.rev != rev):
		return 0, fmt.Errorf("update %s at %d: %w", key, rev, ErrConflict)
	}
	m.last++
	m.recs[key] = memRec[T]{v, m.last}
	return m.last, nil
}

func (m *memKV[T]) keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.recs))
}

// memRuns is a RunStore in memory.
type memRuns struct{ *memKV[schemas.RunStatus] }

func (m memRuns) Runs(context.Context) ([]string, error) { return m.keys(), nil }
func (m memRuns) Get(_ context.Context, id string) (schemas.RunStatus, uint64, error) {
	return m.get(id)
}
func (m memRuns) Create(_ context.Context, st schemas.RunStatus) (uint64, error) {
	return m.put(st.Spec.RunID, st, 0, true)
}
func (m memRuns) Update(_ context.Context, st schemas.RunStatus, rev uint64) (uint64, error) {
	return m.put(st.Spec.RunID, st, rev, false)
}

// memEpisodes is an EpisodeStore in memory.
type memEpisodes struct{ *memKV[[]byte] }

func (m memEpisodes) Get(_ context.Context, key string) ([]byte, uint64, error) {
	b, rev, err := m.get(key)
	return slices.Clone(b), rev, err
}
func (m memEpisodes) Create(_ context.Context, key string, chunk []byte) (uint64, error) {
	return m.put(key, slices.Clone(chunk), 0, true)
}
func (m memEpisodes) Update(_ context.Context, key string, chunk []byte, rev uint64) (uint64, error) {
	return m.put(key, slices.Clone(chunk), rev, false)
}

// published is one message a fake publisher saw.
type published struct {
	Subject, MsgID string
	V              schemas.Validator
}

// memBus records what a Dispatcher publishes, deduplicated by message id as
// JetStream's dedupe window does, and validates it as bus.Conn.Publish does.
type memBus struct {
	mu   sync.Mutex
	msgs []published
	seen map[string]bool
	fail error
}

func (b *memBus) Publish(_ context.Context, subject, msgID string, v schemas.Validator) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return b.fail
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	if b.seen[msgID] {
		return nil
	}
	b.seen[msgID] = true
	b.msgs = append(b.msgs, published{subject, msgID, v})
	return nil
}

// sent returns the messages of type T published so far.
func sent[T schemas.Validator](b *memBus) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []T
	for _, m := range b.msgs {
		if v, ok := m.V.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// requests returns the episode requests published so far.
func (b *memBus) requests() []schemas.EpisodeRequest { return sent[schemas.EpisodeRequest](b) }

// results returns the episode results published so far.
func (b *memBus) results() []schemas.EpisodeResult { return sent[schemas.EpisodeResult](b) }
