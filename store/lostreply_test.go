package store

import (
	"context"
	"errors"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
)

// lossyBackend stores every object but reports the first create as failed,
// like an S3 PUT whose reply is lost when the server dies.
type lossyBackend struct {
	*dirBackend
	failed bool
}

func (l *lossyBackend) create(ctx context.Context, key string, data []byte) error {
	if err := l.dirBackend.create(ctx, key, data); err != nil {
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
	t.Run("without claims", func(t *testing.T) { testLostReply(t, nil) })
	// With claims the retry finds its own claim, creates the same file
	// again, is refused and reads the rows there.
	t.Run("with claims", func(t *testing.T) { testLostReply(t, NewMemClaims()) })
}

func testLostReply(t *testing.T, claims Claims) {
	dir, err := newDirBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := newStore("lossy", &lossyBackend{dirBackend: dir})
	if claims != nil {
		s.WithClaims(claims)
	}
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
