package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Key-value errors, whatever the transport: code outside bus tests these
// with errors.Is, never the NATS client's own.
var (
	// ErrNotFound: no value under the key.
	ErrNotFound = errors.New("not found")
	// ErrConflict: Create found the key taken, or Update found a newer
	// revision than the one it was given.
	ErrConflict = errors.New("revision conflict")
)

// kvErr maps the NATS client's key-value errors to ErrNotFound and
// ErrConflict (keeping the original in the chain).
func kvErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, jetstream.ErrKeyExists):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

// rawKV is the byte-level store a Bucket encodes into: a plain key-value
// bucket, or a StateKV that offloads large values.
type rawKV interface {
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	Create(ctx context.Context, key string, value []byte) (uint64, error)
	Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
}

// plainKV is rawKV on a jetstream.KeyValue.
type plainKV struct{ kv jetstream.KeyValue }

func (p plainKV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := p.kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func (p plainKV) Create(ctx context.Context, key string, v []byte) (uint64, error) {
	return p.kv.Create(ctx, key, v)
}

func (p plainKV) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	return p.kv.Update(ctx, key, v, rev)
}

// Bucket is a typed key-value bucket (one created by EnsureStreams): values
// of type T, JSON-encoded (a []byte T is stored as is), read and written at
// a revision. Errors are ErrNotFound and ErrConflict (errors.Is); a stored
// value that does not decode is a Permanent error.
type Bucket[T any] struct {
	name string
	kv   jetstream.KeyValue
	raw  rawKV
}

// OpenBucket opens the bucket named name.
func OpenBucket[T any](ctx context.Context, c *Conn, name string) (*Bucket[T], error) {
	kv, err := c.js.KeyValue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", name, err)
	}
	b := boundedKV{kv}
	return &Bucket[T]{name: name, kv: b, raw: plainKV{b}}, nil
}

// OpenStateBucket opens the bucket named name with large values offloaded
// to the blob store (see StateKV), for values that may outgrow a message.
func OpenStateBucket[T any](ctx context.Context, c *Conn, name string) (*Bucket[T], error) {
	s, err := c.StateKV(ctx, name)
	if err != nil {
		return nil, err
	}
	return &Bucket[T]{name: name, kv: s.kv, raw: s}, nil
}

func (b *Bucket[T]) encode(v T) ([]byte, error) {
	if raw, ok := any(v).([]byte); ok {
		return raw, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, Permanent(fmt.Errorf("%s: encode: %w", b.name, err))
	}
	return data, nil
}

func (b *Bucket[T]) decode(key string, data []byte) (T, error) {
	var v T
	if p, ok := any(&v).(*[]byte); ok {
		*p = data
		return v, nil
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, Permanent(fmt.Errorf("%s/%s: decode: %w", b.name, key, err))
	}
	return v, nil
}

// Get returns key's value and revision.
func (b *Bucket[T]) Get(ctx context.Context, key string) (T, uint64, error) {
	data, rev, err := b.raw.Get(ctx, key)
	if err != nil {
		var zero T
		return zero, 0, kvErr(err)
	}
	v, err := b.decode(key, data)
	return v, rev, err
}

// Create stores a new key; ErrConflict when it exists.
func (b *Bucket[T]) Create(ctx context.Context, key string, v T) (uint64, error) {
	data, err := b.encode(v)
	if err != nil {
		return 0, err
	}
	rev, err := b.raw.Create(ctx, key, data)
	return rev, kvErr(err)
}

// Update replaces key's value if its revision is still rev; ErrConflict
// when it moved on.
func (b *Bucket[T]) Update(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
	data, err := b.encode(v)
	if err != nil {
		return 0, err
	}
	rev, err = b.raw.Update(ctx, key, data, rev)
	return rev, kvErr(err)
}

// Put stores v under key whatever its revision (no compare-and-set).
func (b *Bucket[T]) Put(ctx context.Context, key string, v T) (uint64, error) {
	data, err := b.encode(v)
	if err != nil {
		return 0, err
	}
	rev, err := b.kv.Put(ctx, key, data)
	return rev, kvErr(err)
}

// Delete removes key.
func (b *Bucket[T]) Delete(ctx context.Context, key string) error {
	return kvErr(b.kv.Delete(ctx, key))
}

// Keys lists the bucket's keys (none is not an error).
func (b *Bucket[T]) Keys(ctx context.Context) ([]string, error) {
	keys, err := b.kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	return keys, err
}
