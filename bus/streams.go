package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// StreamOptions tune the streams EnsureStreams creates.
type StreamOptions struct {
	// Storage is file (default) or memory.
	Memory bool
	// PlacementCluster and PlacementTags place new streams and buckets on
	// a named cluster or on servers with these server_tags (none: anywhere).
	PlacementCluster string
	PlacementTags    []string
	flagErr          *error // a bad MEDGYM_REPLICAS, reported by Validate
	// MaxAge bounds how long messages are kept for replay (default 7 days).
	MaxAge time.Duration
	// Duplicates is the dedupe window for Nats-Msg-Id (default 10 min).
	Duplicates time.Duration
	// Replicas for clustered servers (default 1).
	Replicas int
	// DeadLetterMaxAge, DeadLetterMaxBytes and DeadLetterMaxMsgs bound the
	// dead-letter stream (defaults DefaultDeadLetterMaxAge,
	// DefaultDeadLetterMaxBytes, DefaultDeadLetterMaxMsgs); past any of
	// them the oldest dead letters are discarded.
	DeadLetterMaxAge   time.Duration
	DeadLetterMaxBytes int64
	DeadLetterMaxMsgs  int64
}

// Bounds of the dead-letter stream. Junk never reaches it (see Junk), so
// what fills it is messages of real runs that a handler gave up on; a dead
// letter can be as large as a finished episode (up to the 8 MiB payload).
const (
	DefaultDeadLetterMaxAge   = 14 * 24 * time.Hour
	DefaultDeadLetterMaxBytes = 1 << 30 // 1 GiB
	DefaultDeadLetterMaxMsgs  = 100_000
)

func (o StreamOptions) withDefaults() StreamOptions {
	if o.MaxAge == 0 {
		o.MaxAge = 7 * 24 * time.Hour
	}
	if o.Duplicates == 0 {
		o.Duplicates = 10 * time.Minute
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.DeadLetterMaxAge == 0 {
		o.DeadLetterMaxAge = DefaultDeadLetterMaxAge
	}
	if o.DeadLetterMaxBytes == 0 {
		o.DeadLetterMaxBytes = DefaultDeadLetterMaxBytes
	}
	if o.DeadLetterMaxMsgs == 0 {
		o.DeadLetterMaxMsgs = DefaultDeadLetterMaxMsgs
	}
	return o
}

// kvBuckets are the key-value buckets EnsureStreams creates, each keeping
// one value per key; expires: its entries live as long as the messages
// (StreamOptions.MaxAge), else until deleted.
var kvBuckets = []struct {
	name    string
	expires bool
}{
	{name: schemas.BucketRuns},
	{name: schemas.BucketEpisodes},
	{name: schemas.BucketCompletions},
	{name: schemas.BucketEnvSessions},
	// A claim on a stored episode matters while its result message can
	// be redelivered (ADR 27): it lives as long as the messages do.
	{name: schemas.BucketStored, expires: true},
}

func (o StreamOptions) storage() jetstream.StorageType {
	if o.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// streamConfig is the configuration EnsureStreams gives stream (o with
// its defaults), replicas and placement aside.
func streamConfig(name string, subj schemas.Subject, o StreamOptions) jetstream.StreamConfig {
	cfg := jetstream.StreamConfig{
		Name:       name,
		Subjects:   []string{subj.Wildcard()},
		Retention:  jetstream.LimitsPolicy,
		Storage:    o.storage(),
		MaxAge:     o.MaxAge,
		Duplicates: o.Duplicates,
		Discard:    jetstream.DiscardOld,
	}
	if name == schemas.StreamDeadLetter {
		cfg.MaxAge, cfg.MaxBytes, cfg.MaxMsgs = o.DeadLetterMaxAge, o.DeadLetterMaxBytes, o.DeadLetterMaxMsgs
	}
	return cfg
}

// EnsureStreams creates or updates every stream and key-value bucket named
// in schemas and the blob object store. Provision runs it (`medgym nats
// provision`), and so does every process whose connection creates (see
// ProvisionMode and PrepareStreams); it is idempotent.
func EnsureStreams(ctx context.Context, c *Conn, o StreamOptions) error {
	js := c.js
	o = o.withDefaults()
	storage := o.storage()
	for name, subj := range schemas.StreamSubjects {
		cfg := streamConfig(name, subj, o)
		var existing *jetstream.StreamConfig
		cfg.Replicas, cfg.Placement, existing = o.placed(ctx, js, name)
		if existing != nil && sameStream(*existing, cfg) {
			// Every process of every service ensures every stream at
			// start; on a cluster an update is a meta-layer proposal, and
			// a fleet starting at once timed them out.
			continue
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return explainStorage(ctx, c, o, fmt.Errorf("ensure stream %s: %w", name, err))
		}
	}
	for _, b := range kvBuckets {
		replicas, placement, _ := o.placed(ctx, js, "KV_"+b.name)
		var ttl time.Duration
		if b.expires {
			ttl = o.MaxAge
		}
		if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: b.name, Storage: storage, Replicas: replicas, Placement: placement, History: 1, TTL: ttl,
		}); err != nil {
			return explainStorage(ctx, c, o, fmt.Errorf("ensure key-value bucket %s: %w", b.name, err))
		}
	}
	// Offloaded payloads live as long as the messages that name them; one
	// store per writing service, and one for processes that run them all.
	for _, b := range schemas.BlobBuckets() {
		replicas, placement, _ := o.placed(ctx, js, "OBJ_"+b)
		if _, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: b, Storage: storage, Replicas: replicas, Placement: placement, TTL: o.MaxAge,
		}); err != nil {
			return explainStorage(ctx, c, o, fmt.Errorf("ensure object store %s: %w", b, err))
		}
	}
	return nil
}

// ConsumerOptions configure one durable consumer.
type ConsumerOptions struct {
	Stream  string
	Durable string
	Subject schemas.Subject
	// AckWait is how long a delivered message may go without an ack or an
	// in-progress touch before JetStream redelivers it (default 60 s).
	AckWait time.Duration
	// MaxDeliver bounds deliveries (default 5); then the message is a dead letter.
	MaxDeliver int
	// MaxAckPending bounds unacked messages across all subscribers (default 1000).
	MaxAckPending int
	// MaxWaiting bounds the pull requests waiting on the consumer. Every
	// handler slot (HandlerOptions.Concurrency, summed over processes)
	// keeps one waiting, so it must exceed that sum: with JetStream's own
	// default of 512, a worker with 1,000 slots got at most 512 messages
	// at once. Default 4096. JetStream cannot change it on an existing
	// consumer, which keeps the value it was created with.
	MaxWaiting int
}

func (o ConsumerOptions) withDefaults() ConsumerOptions {
	if o.AckWait == 0 {
		o.AckWait = 60 * time.Second
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = 5
	}
	if o.MaxAckPending == 0 {
		o.MaxAckPending = 1000
	}
	if o.MaxWaiting == 0 {
		o.MaxWaiting = 4096
	}
	return o
}

// EnsureConsumer creates or updates a durable, explicit-ack pull consumer.
func EnsureConsumer(ctx context.Context, conn *Conn, o ConsumerOptions) (jetstream.Consumer, error) {
	js := conn.js
	o = o.withDefaults()
	cfg := jetstream.ConsumerConfig{
		Durable:       o.Durable,
		FilterSubject: o.Subject.Wildcard(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		MaxDeliver:    o.MaxDeliver,
		MaxAckPending: o.MaxAckPending,
		MaxWaiting:    o.MaxWaiting,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	c, err := js.CreateOrUpdateConsumer(ctx, o.Stream, cfg)
	if err != nil {
		// A consumer created before MaxWaiting was set (or with another
		// value) keeps its own: update the rest.
		if old, ierr := js.Consumer(ctx, o.Stream, o.Durable); ierr == nil && old.CachedInfo().Config.MaxWaiting != cfg.MaxWaiting {
			cfg.MaxWaiting = old.CachedInfo().Config.MaxWaiting
			c, err = js.CreateOrUpdateConsumer(ctx, o.Stream, cfg)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s on %s: %w", o.Durable, o.Stream, err)
	}
	return c, nil
}
