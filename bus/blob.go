package bus

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// Payloads larger than one NATS message allows (the server's max_payload)
// are offloaded to the schemas.BucketBlobs object store, which splits them
// into chunks: a message then carries only the object's name in the
// HeaderBlob header, and a key-value value a blobPrefix pointer. Readers
// resolve both transparently (Handle, Conn.Payload, StateKV.Get), so the
// size of an episode's state or result never fails a publish: an agent that
// prints a lot cannot turn its episode into an infra failure.

// HeaderBlob names the object holding a message's payload; the message
// body is then empty. HeaderBlobBucket names its object store when it is
// not schemas.BucketBlobs: a service writes to its own
// (schemas.BlobBucket), which no other service may write to or purge.
const (
	HeaderBlob       = "Medgym-Blob"
	HeaderBlobBucket = "Medgym-Blob-Bucket"
)

// blobHeadroom is kept free under max_payload for headers and the
// JetStream envelope.
const blobHeadroom = 16 << 10

// blobPrefix starts a key-value value that points at an object: the
// object's name, in schemas.BucketBlobs, or "@<bucket>:<name>". JSON never
// starts with a NUL byte, so a plain value cannot be mistaken for one.
const blobPrefix = "\x00medgym-blob:"

// blobChunk is the object store chunk size (JetStream's default), or less
// under a smaller max_payload.
const blobChunk = 128 << 10

// blobs caches the object store handles of a connection; bucket is the
// one it writes to ("": schemas.BucketBlobs).
type blobs struct {
	mu     sync.Mutex
	bucket string
	obj    map[string]jetstream.ObjectStore
}

// WithBlobService makes the connection offload payloads to service's own
// object store (schemas.BlobBucket), which deploy/nats lets only that
// service's user write to; it reads every store.
func WithBlobService(service string) ConnectOption {
	return func(c *connectConfig) { c.blobBucket = schemas.BlobBucket(service) }
}

// BlobBucket is the object store this connection offloads to.
func (c *Conn) BlobBucket() string {
	if c.blobs.bucket == "" {
		return schemas.BucketBlobs
	}
	return c.blobs.bucket
}

// InlineMax is the largest payload this connection publishes as is; larger
// ones are offloaded.
func (c *Conn) InlineMax() int {
	return max(int(c.nc.MaxPayload())-blobHeadroom, 1024)
}

func (c *Conn) objects(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	c.blobs.mu.Lock()
	defer c.blobs.mu.Unlock()
	if obj, ok := c.blobs.obj[bucket]; ok {
		return obj, nil
	}
	obj, err := c.js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("blob store %s (created by EnsureStreams): %w", bucket, err)
	}
	if c.blobs.obj == nil {
		c.blobs.obj = map[string]jetstream.ObjectStore{}
	}
	bo := boundedObjects{obj}
	c.blobs.obj[bucket] = bo
	return bo, nil
}

// putBlob writes an object to this connection's store (BlobBucket).
func (c *Conn) putBlob(ctx context.Context, name string, data []byte) error {
	obj, err := c.objects(ctx, c.BlobBucket())
	if err != nil {
		return err
	}
	meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(min(blobChunk, c.InlineMax()))}}
	if _, err := obj.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("offload %d bytes to blob %s/%s: %w", len(data), c.BlobBucket(), name, err)
	}
	return nil
}

// getBlob reads an object of bucket; a missing one, or a bucket that is
// not one of medgym's object stores (the header is the publisher's), is a
// permanent error.
func (c *Conn) getBlob(ctx context.Context, bucket, name string) ([]byte, error) {
	if !slices.Contains(schemas.BlobBuckets(), bucket) {
		return nil, Permanent(fmt.Errorf("blob %s/%s: not one of the blob stores %v", bucket, name, schemas.BlobBuckets()))
	}
	obj, err := c.objects(ctx, bucket)
	if err != nil {
		return nil, err
	}
	b, err := obj.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, Permanent(fmt.Errorf("blob %s/%s: %w (expired or deleted)", bucket, name, err))
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s/%s: %w", bucket, name, err)
	}
	return b, nil
}

// deleteBlob deletes an object of bucket if it is this connection's
// store; another's expires with its TTL (only its writer may purge it).
func (c *Conn) deleteBlob(ctx context.Context, bucket, name string) {
	if bucket != c.BlobBucket() {
		return
	}
	obj, err := c.objects(ctx, bucket)
	if err == nil {
		err = obj.Delete(ctx, name)
	}
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		c.log.Warn("delete blob (it expires with the bucket's TTL)", "bucket", bucket, "blob", name, "err", err)
	}
}

// offload prepares msg to carry data: as its body when it fits, else in an
// object named after the subject and msgID (a re-publish overwrites the
// same object with the same bytes).
func (c *Conn) offload(ctx context.Context, msg *nats.Msg, msgID string, data []byte) error {
	if len(data) <= c.InlineMax() {
		msg.Data = data
		return nil
	}
	id := msgID
	if id == "" {
		id = rand.Text()
	}
	name := "msg/" + msg.Subject + "/" + id
	if err := c.putBlob(ctx, name, data); err != nil {
		return err
	}
	msg.Header.Set(HeaderBlob, name)
	if b := c.BlobBucket(); b != schemas.BucketBlobs {
		msg.Header.Set(HeaderBlobBucket, b)
	}
	msg.Data = nil
	return nil
}

// Payload returns the payload of a JetStream message, fetching it from the
// blob store when the message was offloaded. Code that reads a stream
// directly (not through Handle) uses it instead of Data.
func (c *Conn) Payload(ctx context.Context, m jetstream.Msg) ([]byte, error) {
	name := m.Headers().Get(HeaderBlob)
	if name == "" {
		return m.Data(), nil
	}
	bucket := m.Headers().Get(HeaderBlobBucket)
	if bucket == "" {
		bucket = schemas.BucketBlobs
	}
	return c.getBlob(ctx, bucket, name)
}

// StateKV is a key-value bucket whose values may be larger than one NATS
// message: a value over Conn.InlineMax is stored as an object, and the key
// holds a pointer to it. Create and Update keep JetStream's
// compare-and-set; the object an update replaces is deleted after it.
type StateKV struct {
	conn   *Conn
	kv     jetstream.KeyValue
	bucket string
}

// StateKV opens a bucket created by EnsureStreams.
func (c *Conn) StateKV(ctx context.Context, bucket string) (*StateKV, error) {
	kv, err := c.js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", bucket, err)
	}
	return &StateKV{conn: c, kv: boundedKV{kv}, bucket: bucket}, nil
}

// Get returns key's value and revision; jetstream.ErrKeyNotFound when absent.
func (s *StateKV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	v := e.Value()
	bucket, name, ok := blobRef(v)
	if !ok {
		return v, e.Revision(), nil
	}
	b, err := s.conn.getBlob(ctx, bucket, name)
	if err != nil {
		return nil, 0, fmt.Errorf("%s/%s: %w", s.bucket, key, err)
	}
	return b, e.Revision(), nil
}

// Create stores a new key; it fails when the key exists.
func (s *StateKV) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	return s.put(ctx, key, value, func(v []byte) (uint64, error) { return s.kv.Create(ctx, key, v) })
}

// Update replaces key's value if its revision is still rev.
func (s *StateKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	var oldBucket, old string
	if e, err := s.kv.Get(ctx, key); err == nil && e.Revision() == rev {
		oldBucket, old, _ = blobRef(e.Value())
	}
	n, err := s.put(ctx, key, value, func(v []byte) (uint64, error) { return s.kv.Update(ctx, key, v, rev) })
	if err == nil && old != "" {
		s.conn.deleteBlob(ctx, oldBucket, old)
	}
	return n, err
}

func (s *StateKV) put(ctx context.Context, key string, value []byte, write func([]byte) (uint64, error)) (uint64, error) {
	if len(value) <= s.conn.InlineMax() {
		return write(value)
	}
	name := "kv/" + s.bucket + "/" + key + "/" + rand.Text()
	if err := s.conn.putBlob(ctx, name, value); err != nil {
		return 0, err
	}
	bucket := s.conn.BlobBucket()
	ref := blobPrefix + name
	if bucket != schemas.BucketBlobs {
		ref = blobPrefix + "@" + bucket + ":" + name
	}
	rev, err := write([]byte(ref))
	if err != nil {
		s.conn.deleteBlob(ctx, bucket, name) // lost the compare-and-set, or the write failed
		return 0, err
	}
	return rev, nil
}

// blobRef reads a key-value value that points at an object: its store and
// name.
func blobRef(v []byte) (bucket, name string, ok bool) {
	if !bytes.HasPrefix(v, []byte(blobPrefix)) {
		return "", "", false
	}
	ref := string(v[len(blobPrefix):])
	if b, n, found := strings.Cut(strings.TrimPrefix(ref, "@"), ":"); found && strings.HasPrefix(ref, "@") {
		return b, n, true
	}
	return schemas.BucketBlobs, ref, true
}
