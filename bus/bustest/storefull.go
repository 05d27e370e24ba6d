package bustest

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
)

// FillerStream is the stream FillStore writes to.
const FillerStream = "TEST_FILLER"

// FillStore fills the JetStream file store of the server at url: it
// writes chunk-byte messages to a stream of its own until the server
// refuses one for a full store (bus.IsStorageFull). It returns how many
// bytes it wrote and a function that purges them, freeing the space.
func FillStore(ctx context.Context, url string, chunk int) (written int64, free func(context.Context) error, err error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, nil, fmt.Errorf("fill store: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return 0, nil, fmt.Errorf("fill store: %w", err)
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: FillerStream, Subjects: []string{"test.filler"}, Storage: jetstream.FileStorage})
	if err != nil {
		nc.Close()
		return 0, nil, fmt.Errorf("fill store: %w", err)
	}
	free = func(ctx context.Context) error {
		defer nc.Close()
		if err := s.Purge(ctx); err != nil {
			return fmt.Errorf("free store: %w", err)
		}
		return nil
	}
	data := make([]byte, chunk)
	for {
		if _, err := js.Publish(ctx, "test.filler", data); err != nil {
			if bus.IsStorageFull(err) {
				return written, free, nil
			}
			nc.Close()
			return written, nil, fmt.Errorf("fill store after %d bytes: %w", written, err)
		}
		written += int64(chunk)
		if ctx.Err() != nil {
			nc.Close()
			return written, nil, ctx.Err()
		}
	}
}

// Undelivered returns the number of messages of stream that its durable
// consumer has not delivered yet.
func Undelivered(ctx context.Context, url, stream, durable string) (uint64, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, fmt.Errorf("undelivered: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, fmt.Errorf("undelivered: %w", err)
	}
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		return 0, fmt.Errorf("undelivered: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("undelivered: %w", err)
	}
	return info.NumPending, nil
}

// DeleteUndelivered deletes up to n messages of stream that its durable
// consumer has not delivered yet, as if they had run out of deliveries or
// been discarded while nothing could record it, and returns their
// Nats-Msg-Id headers.
func DeleteUndelivered(ctx context.Context, url, stream, durable string, n int) ([]string, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, fmt.Errorf("delete undelivered: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("delete undelivered: %w", err)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("delete undelivered: %w", err)
	}
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		return nil, fmt.Errorf("delete undelivered: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("delete undelivered: %w", err)
	}
	var ids []string
	for seq := info.Delivered.Stream + 1; seq <= s.CachedInfo().State.LastSeq && len(ids) < n; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return ids, fmt.Errorf("delete undelivered: %w", err)
		}
		if err := s.DeleteMsg(ctx, seq); err != nil {
			return ids, fmt.Errorf("delete undelivered %d: %w", seq, err)
		}
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
	}
	return ids, nil
}
