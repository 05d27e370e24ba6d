package bus

import (
	"context"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// requestTimeout bounds each request the bus sends to NATS on a caller's
// behalf (a publish waiting for the stream's ack, a key-value read or
// write, an ack waiting for the server's confirmation), whatever deadline
// the caller's context has. nats.go applies its own default (5 s) only to
// a context without a deadline, and never fails a request when the
// connection drops: a request whose reply was lost (the server went away
// between receiving it and answering, and came back) waits for the
// caller's deadline. A handler's context carries its service's deadline,
// however far; a handler waiting there keeps its message alive with
// in-progress acks, so the server never redelivers it, and the run stalls.
// A variable for tests.
var requestTimeout = 10 * time.Second

// bulkTimeout bounds one operation of many requests or messages: an
// object store read or write (a payload in chunks), a bucket's key
// listing, a purge, a look at the episodes in play.
const bulkTimeout = time.Minute

// bounded is ctx cut to at most d (see requestTimeout).
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// boundedKV is a key-value bucket whose every call is bounded (see
// requestTimeout; listings by bulkTimeout).
type boundedKV struct{ jetstream.KeyValue }

func (b boundedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	return b.KeyValue.Get(ctx, key)
}

func (b boundedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	return b.KeyValue.Put(ctx, key, value)
}

func (b boundedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	return b.KeyValue.Create(ctx, key, value, opts...)
}

func (b boundedKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	return b.KeyValue.Update(ctx, key, value, rev)
}

func (b boundedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	return b.KeyValue.Delete(ctx, key, opts...)
}

func (b boundedKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	ctx, cancel := bounded(ctx, bulkTimeout)
	defer cancel()
	return b.KeyValue.Keys(ctx, opts...)
}

// boundedObjects is an object store whose reads, writes and deletes are
// bounded by bulkTimeout.
type boundedObjects struct{ jetstream.ObjectStore }

func (o boundedObjects) Put(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	ctx, cancel := bounded(ctx, bulkTimeout)
	defer cancel()
	return o.ObjectStore.Put(ctx, meta, r)
}

func (o boundedObjects) GetBytes(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) ([]byte, error) {
	ctx, cancel := bounded(ctx, bulkTimeout)
	defer cancel()
	return o.ObjectStore.GetBytes(ctx, name, opts...)
}

func (o boundedObjects) Delete(ctx context.Context, name string) error {
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	return o.ObjectStore.Delete(ctx, name)
}
