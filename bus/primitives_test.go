package bus_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
)

// TestBucket: typed get, create and update at a revision, with the bus's
// own not-found and conflict errors; []byte values are stored as is; a
// value that does not decode is permanent.
func TestBucket(t *testing.T) {
	conn, ctx := setup(t)
	runs, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := runs.Get(ctx, "r1"); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("get of a missing key: %v, want ErrNotFound", err)
	}
	if keys, err := runs.Keys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("keys of an empty bucket: %v, %v", keys, err)
	}
	st := schemas.RunStatus{Spec: schemas.RunSpec{RunID: "r1"}, Total: 3}
	rev, err := runs.Create(ctx, "r1", st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Create(ctx, "r1", st); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	st.Published = 2
	rev2, err := runs.Update(ctx, "r1", st, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Update(ctx, "r1", st, rev); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("update at a stale revision: %v, want ErrConflict", err)
	}
	got, grev, err := runs.Get(ctx, "r1")
	if err != nil || grev != rev2 || got.Published != 2 || got.Total != 3 {
		t.Fatalf("get: %+v at %d (%v), want published 2 at %d", got, grev, err, rev2)
	}
	if keys, err := runs.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != "r1" {
		t.Fatalf("keys: %v, %v", keys, err)
	}

	raw, err := bus.OpenBucket[[]byte](ctx, conn, schemas.BucketCompletions)
	if err != nil {
		t.Fatal(err)
	}
	chunk := []byte{0x00, 0xff, 0x01}
	if _, err := raw.Create(ctx, "r1.0", chunk); err != nil {
		t.Fatal(err)
	}
	if b, _, err := raw.Get(ctx, "r1.0"); err != nil || !bytes.Equal(b, chunk) {
		t.Fatalf("raw value %v (%v), want %v", b, err, chunk)
	}
	// A value that is not a RunStatus (written raw) is a permanent error.
	rawRuns, err := bus.OpenBucket[[]byte](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawRuns.Put(ctx, "bad", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runs.Get(ctx, "bad"); err == nil || !bus.IsPermanent(err) {
		t.Fatalf("get of an undecodable value: %v, want a permanent error", err)
	}
	if err := runs.Delete(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runs.Get(ctx, "bad"); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
}

// TestStateBucketOffloads: a value over the inline limit round-trips
// through the blob store, with the same revision rules.
func TestStateBucketOffloads(t *testing.T) {
	conn, ctx := setup(t)
	states, err := bus.OpenStateBucket[schemas.EpisodeState](ctx, conn, schemas.BucketEpisodes)
	if err != nil {
		t.Fatal(err)
	}
	big := schemas.EpisodeState{Request: schemas.EpisodeRequest{RunID: "r1", EpisodeID: "r1--t-k0"},
		Turns: []schemas.Turn{{Observation: string(bytes.Repeat([]byte("x"), conn.InlineMax()+10))}}}
	rev, err := states.Create(ctx, "e", big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := states.Create(ctx, "e", big); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	got, grev, err := states.Get(ctx, "e")
	if err != nil || grev != rev || len(got.Turns) != 1 || got.Turns[0].Observation != big.Turns[0].Observation {
		t.Fatalf("offloaded state did not round-trip: rev %d/%d, %v", grev, rev, err)
	}
}

// TestFollow: a follower yields a subject's messages in order, skipping
// those that do not validate, and continues after the last one yielded;
// Next waits for the next one and reports none without an error.
func TestFollow(t *testing.T) {
	conn, ctx := setup(t)
	for _, ep := range []string{"r1--a-k0", "r1--b-k0"} {
		if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), ep, score(ep)); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.PublishRaw(ctx, schemas.EpisodeScored.For("r1"), []byte(`{"run_id":""}`)); err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("other"), "o", schemas.Score{RunID: "other", EpisodeID: "other--a-k0", Outcome: schemas.OutcomeCorrect}); err != nil {
		t.Fatal(err)
	}
	f, err := bus.Follow[schemas.Score](ctx, conn, schemas.StreamScores, schemas.EpisodeScored.For("r1"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m, err := range f.Available() {
		if err != nil {
			t.Fatal(err)
		}
		if m.Time.IsZero() {
			t.Fatal("a message without its stream time")
		}
		got = append(got, m.Value.EpisodeID)
	}
	if len(got) != 2 || got[0] != "r1--a-k0" || got[1] != "r1--b-k0" || f.Skipped() != 1 {
		t.Fatalf("followed %v, skipped %d; want both scores of r1 in order and one skipped", got, f.Skipped())
	}
	if _, ok, err := f.Next(100 * time.Millisecond); ok || err != nil {
		t.Fatalf("next with nothing new: ok %v, %v", ok, err)
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "c", score("r1--c-k0")); err != nil {
		t.Fatal(err)
	}
	m, ok, err := f.Next(10 * time.Second)
	if !ok || err != nil || m.Value.EpisodeID != "r1--c-k0" {
		t.Fatalf("next: %+v, %v, %v; want the third score", m.Value, ok, err)
	}
	if n, err := conn.SubjectCount(ctx, schemas.StreamScores, schemas.EpisodeScored.For("r1")); err != nil || n != 4 {
		t.Fatalf("subject count %d, %v; want 4", n, err)
	}
	if err := conn.Purge(ctx, schemas.StreamScores, schemas.EpisodeScored.For("r1")); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.SubjectCount(ctx, schemas.StreamScores, schemas.EpisodeScored.For("r1")); err != nil || n != 0 {
		t.Fatalf("subject count after purge %d, %v; want 0", n, err)
	}
	if n, err := conn.StreamCount(ctx, schemas.StreamScores); err != nil || n != 1 {
		t.Fatalf("stream count after purge %d, %v; want the other run's 1", n, err)
	}
}

// TestBroadcast: every subscriber hears every valid message; invalid ones
// are ignored; after stop, nothing more arrives.
func TestBroadcast(t *testing.T) {
	conn, ctx := setup(t)
	var mu sync.Mutex
	heard := map[int][]string{}
	var stops []func()
	for i := range 2 {
		stop, err := bus.Broadcast(conn, schemas.EpisodeScored.Wildcard(), func(sc schemas.Score) {
			mu.Lock()
			heard[i] = append(heard[i], sc.EpisodeID)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
	}
	if err := conn.PublishRaw(ctx, schemas.EpisodeScored.For("r1"), []byte(`{"run_id":""}`)); err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "a", score("r1--a-k0")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard[0]) == 1 && len(heard[1]) == 1
	})
	for _, stop := range stops {
		stop()
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "b", score("r1--b-k0")); err != nil {
		t.Fatal(err)
	}
	// A third subscriber proves the message was delivered before we look.
	got := make(chan struct{}, 1)
	stop, err := bus.Broadcast(conn, schemas.EpisodeScored.Wildcard(), func(schemas.Score) { got <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "c", score("r1--c-k0")); err != nil {
		t.Fatal(err)
	}
	<-got
	mu.Lock()
	defer mu.Unlock()
	if len(heard[0]) != 1 || len(heard[1]) != 1 || heard[0][0] != "r1--a-k0" {
		t.Fatalf("heard %v; want only the valid score before stop, once each", heard)
	}
}
