package store

import (
	"context"
	"errors"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
)

// lossyBackend stores every object but reports the first put as failed, like
// an S3 PUT whose reply is lost when the server dies.
type lossyBackend struct {
	*dirBackend
	failed bool
}

func (l *lossyBackend) put(ctx context.Context, key string, data []byte) error {
	if err := l.dirBackend.put(ctx, key, data); err != nil {
		return err
	}
	if !l.failed {
		l.failed = true
		return errors.New("connection reset by peer")
	}
	return nil
}

func TestWriteAfterLostReplyStoresOnce(t *testing.T) {
	t.Parallel()
	dir, err := newDirBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{url: "lossy", be: &lossyBackend{dirBackend: dir}, seen: map[string]map[string]struct{}{}}
	rows := []parquet.Row{
		{RunID: "r1", EpisodeID: "e1", Dataset: "ds", Outcome: "correct", SchemaVersion: parquet.SchemaVersion},
		{RunID: "r1", EpisodeID: "e2", Dataset: "ds", Outcome: "incorrect", SchemaVersion: parquet.SchemaVersion},
	}
	if _, err := s.Write(t.Context(), rows); err == nil {
		t.Fatal("first write: want the reported failure")
	}
	// The caller retries the same rows (JetStream redelivery).
	keys, err := s.Write(t.Context(), rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("retry wrote %v; the rows were already stored", keys)
	}
	all, err := s.partKeys(t.Context(), "r1")
	if err != nil || len(all) != 1 {
		t.Fatalf("run has %d files (%v), want 1", len(all), err)
	}
}
