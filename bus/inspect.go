package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// Purge removes stream's messages on subject (a run's episode requests no
// worker has taken, when the run is cancelled with drop).
func (c *Conn) Purge(ctx context.Context, stream, subject string) error {
	ctx, cancel := bounded(ctx, bulkTimeout)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err == nil {
		err = s.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
	if err != nil {
		return fmt.Errorf("purge %s from %s: %w", subject, stream, err)
	}
	return nil
}

// SubjectCount is the number of stream's messages stored on subject.
func (c *Conn) SubjectCount(ctx context.Context, stream, subject string) (uint64, error) {
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	return info.State.Subjects[subject], nil
}

// StreamCount is the number of messages stream holds.
func (c *Conn) StreamCount(ctx context.Context, stream string) (uint64, error) {
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// ConsumerBacklog is the number of messages a durable consumer has not
// delivered yet plus those delivered and not acked.
func (c *Conn) ConsumerBacklog(ctx context.Context, stream, durable string) (uint64, error) {
	cons, err := c.js.Consumer(ctx, stream, durable)
	if err != nil {
		return 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.NumPending + uint64(info.NumAckPending), nil
}

// BusyConsumer names a durable consumer of any medgym stream that still has
// messages to deliver or acks outstanding ("" when every one is idle).
func (c *Conn) BusyConsumer(ctx context.Context) (string, error) {
	for stream := range schemas.StreamSubjects {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return "", err
		}
		lister := s.ListConsumers(ctx)
		for ci := range lister.Info() {
			if ci.Config.Durable != "" && (ci.NumPending > 0 || ci.NumAckPending > 0) {
				return stream + "/" + ci.Name, nil
			}
		}
	}
	return "", nil
}

// ConsumerStates describes every durable consumer of the medgym streams,
// one line each: messages not yet delivered, delivered and not acked,
// redelivered, and the pull requests waiting on the server (0 with work
// pending means no process is pulling). For diagnosing a stalled run.
func (c *Conn) ConsumerStates(ctx context.Context) ([]string, error) {
	var out []string
	for _, stream := range slices.Sorted(maps.Keys(schemas.StreamSubjects)) {
		s, err := c.js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("stream %s: %w", stream, err)
		}
		lister := s.ListConsumers(ctx)
		for ci := range lister.Info() {
			if ci.Config.Durable == "" {
				continue
			}
			out = append(out, fmt.Sprintf("%s/%s: pending %d, ack pending %d, redelivered %d, waiting pulls %d, delivered seq %d, ack floor %d",
				stream, ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream))
		}
		if err := lister.Err(); err != nil {
			return out, fmt.Errorf("stream %s: %w", stream, err)
		}
	}
	return out, nil
}

// PublishRaw publishes data to subject as is, with no validation, no
// message id and no offload: for tests and tools that must send what no
// service would (junk). Services use Publish.
func (c *Conn) PublishRaw(ctx context.Context, subject string, data []byte) error {
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	if _, err := c.js.Publish(ctx, subject, data); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

// PublishCore sends data to subject over core NATS (no stream ack) and
// flushes: for tests of the server's permissions, whose violations only
// the connection's error handler sees.
func (c *Conn) PublishCore(subject string, data []byte) error {
	if err := c.nc.Publish(subject, data); err != nil {
		return err
	}
	return c.nc.Flush()
}

// PutBlob, GetBlob and DeleteBlob reach this connection's blob store
// (BlobBucket) directly, GetBlobIn any store: for tests of who may use
// them. Services never call them; Publish and OpenStateBucket offload
// through them.
func (c *Conn) PutBlob(ctx context.Context, name string, data []byte) error {
	return c.putBlob(ctx, name, data)
}

// GetBlob reads a blob (see PutBlob).
func (c *Conn) GetBlob(ctx context.Context, name string) ([]byte, error) {
	return c.getBlob(ctx, c.BlobBucket(), name)
}

// GetBlobIn reads a blob of bucket (see PutBlob).
func (c *Conn) GetBlobIn(ctx context.Context, bucket, name string) ([]byte, error) {
	return c.getBlob(ctx, bucket, name)
}

// DeleteBlob deletes a blob (see PutBlob).
func (c *Conn) DeleteBlob(ctx context.Context, name string) error {
	obj, err := c.objects(ctx, c.BlobBucket())
	if err != nil {
		return err
	}
	return obj.Delete(ctx, name)
}

// StreamReplica is one follower of a clustered stream.
type StreamReplica struct {
	Name             string
	Current, Offline bool
	Lag              uint64
}

// StreamPlacement is where a stream lives: its replica count and, in a
// cluster, the cluster's name, the leader and the followers.
type StreamPlacement struct {
	Replicas  int
	Cluster   string
	Leader    string
	Followers []StreamReplica
}

// StreamPlacement reads stream's replica count and cluster placement.
func (c *Conn) StreamPlacement(ctx context.Context, stream string) (StreamPlacement, error) {
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return StreamPlacement{}, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return StreamPlacement{}, fmt.Errorf("stream %s: %w", stream, err)
	}
	p := StreamPlacement{Replicas: info.Config.Replicas}
	if info.Cluster != nil {
		p.Cluster, p.Leader = info.Cluster.Name, info.Cluster.Leader
		for _, r := range info.Cluster.Replicas {
			p.Followers = append(p.Followers, StreamReplica{Name: r.Name, Current: r.Current, Offline: r.Offline, Lag: r.Lag})
		}
	}
	return p, nil
}
