package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
)

// junkBodies can never be handled by any handler.
var junkBodies = map[string]string{
	"empty":   "",
	"null":    "null",
	"array":   "[]",
	"garbage": "\x00garbage{",
	"number":  "42",
	"spaces":  "   ",
}

// drained waits until the durable has acked every message the stream holds.
func drained(t *testing.T, ctx context.Context, conn *bus.Conn, stream, durable string) {
	t.Helper()
	c, err := conn.JS.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	s, err := conn.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := si.State.LastSeq
	// A single pull subscription sometimes idles until its pull request
	// expires (30 s) before it asks again; two slots per handler below make
	// that rare, and the deadline outlasts it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ci, err := c.Info(ctx)
		if err == nil && ci.AckFloor.Stream >= last && ci.NumAckPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not drained: %+v", durable, ci)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func streamMsgs(t *testing.T, ctx context.Context, conn *bus.Conn, stream string) uint64 {
	t.Helper()
	s, err := conn.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestJunkIsAckedCountedNotDeadLettered: bodies that are not JSON objects,
// objects that do not validate, and a handler's own Junk verdict are acked
// and counted by reason; none reaches the handler (except the verdict's)
// and none becomes a dead letter. A Permanent error still does (positive
// control).
func TestJunkIsAckedCountedNotDeadLettered(t *testing.T) {
	conn, ctx := setup(t)
	rt, err := bus.NewRouter(conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rt.Metrics = bus.NewMetrics()
	var calls atomic.Int32
	h := func(ctx context.Context, sc schemas.Score) error {
		calls.Add(1)
		switch sc.EpisodeID {
		case "ghost":
			return bus.Junkf(bus.JunkUnknownRun, "unknown run %s", sc.RunID)
		case "bad":
			return bus.Permanent(errors.New("cannot ever handle this"))
		}
		return nil
	}
	err = bus.Handle(rt, "scores", bus.HandlerOptions{Concurrency: 2, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: "test-junk", Subject: schemas.EpisodeScored}}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	defer stop()
	for name, body := range junkBodies {
		if _, err := conn.JS.Publish(ctx, schemas.EpisodeScored.For("r1"), []byte(body)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Objects that are not a valid Score.
	for _, body := range []string{`{}`, `{"run_id":"r1","episode_id":"e1","outcome":"great"}`} {
		if _, err := conn.JS.Publish(ctx, schemas.EpisodeScored.For("r1"), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	// A JSON object of the wrong shape is invalid too.
	if _, err := conn.JS.Publish(ctx, schemas.EpisodeScored.For("r1"), []byte(`{"run_id":5}`)); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{"ghost", "bad", "good"} {
		if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), ep, score(ep)); err != nil {
			t.Fatal(err)
		}
	}
	drained(t, ctx, conn, schemas.StreamScores, "test-junk")
	if got := calls.Load(); got != 3 {
		t.Fatalf("handler called %d times, want 3 (junk bodies never reach it)", got)
	}
	for reason, want := range map[string]float64{
		bus.JunkUndecodable: float64(len(junkBodies)),
		bus.JunkInvalid:     3,
		bus.JunkUnknownRun:  1,
	} {
		if got := rt.Metrics.Junk("scores", reason); got != want {
			t.Errorf("junk %s = %v, want %v", reason, got, want)
		}
	}
	// Only the permanent failure is a dead letter.
	if n := streamMsgs(t, ctx, conn, schemas.StreamDeadLetter); n != 1 {
		t.Fatalf("dead-letter stream holds %d messages, want 1 (only the permanent failure)", n)
	}
}

// TestDeadLetterPathNeverDeadLetters: the old loop. A dead-letter handler
// that fails permanently, and junk published to the dead-letter subjects,
// are acked and counted; the dead-letter stream holds exactly what was
// published to it, and its consumer drains.
func TestDeadLetterPathNeverDeadLetters(t *testing.T) {
	conn, ctx := setup(t)
	rt, err := bus.NewRouter(conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rt.Metrics = bus.NewMetrics()
	var calls atomic.Int32
	h := func(ctx context.Context, sc schemas.Score) error {
		calls.Add(1)
		return bus.Permanent(errors.New("this dead letter is useless"))
	}
	err = bus.Handle(rt, "dead", bus.HandlerOptions{Concurrency: 2, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamDeadLetter, Durable: "test-dead", Subject: schemas.DeadLetter}}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	defer stop()
	published := uint64(0)
	for _, body := range junkBodies {
		if _, err := conn.JS.Publish(ctx, schemas.DeadLetter.For("poison"), []byte(body)); err != nil {
			t.Fatal(err)
		}
		published++
	}
	if err := conn.Publish(ctx, schemas.DeadLetter.For("poison"), "", score("e1")); err != nil {
		t.Fatal(err)
	}
	published++
	drained(t, ctx, conn, schemas.StreamDeadLetter, "test-dead")
	if n := streamMsgs(t, ctx, conn, schemas.StreamDeadLetter); n != published {
		t.Fatalf("dead-letter stream holds %d messages, want the %d published: the dead-letter path produced dead letters", n, published)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("handler called %d times, want 1", got)
	}
	if got := rt.Metrics.Junk("dead", bus.JunkUndecodable); got != float64(len(junkBodies)) {
		t.Errorf("undecodable dead letters counted %v, want %d", got, len(junkBodies))
	}
	if got := rt.Metrics.Junk("dead", bus.JunkDeadLetter); got != 1 {
		t.Errorf("unusable dead letters counted %v, want 1", got)
	}
}

// TestPoisonCopyIDAndFirstReason: a dead-letter copy carries the
// deterministic id dead/<stream>/<seq>, and a message that already carries
// a dead-letter reason keeps it.
func TestPoisonCopyIDAndFirstReason(t *testing.T) {
	conn, ctx := setup(t)
	rt, err := bus.NewRouter(conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, sc schemas.Score) error {
		return bus.Permanent(fmt.Errorf("second reason for %s", sc.EpisodeID))
	}
	err = bus.Handle(rt, "scores", bus.HandlerOptions{Concurrency: 2, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: "test-poison", Subject: schemas.EpisodeScored}}, h)
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	defer stop()
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "a", score("a")); err != nil {
		t.Fatal(err)
	}
	data, err := schemas.Encode(score("b"))
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(schemas.EpisodeScored.For("r1"))
	m.Data = data
	m.Header.Set(bus.HeaderDeadReason, "first reason")
	m.Header.Set(bus.HeaderDeadSubject, "medgym.episode.requested.r1")
	if _, err := conn.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	drained(t, ctx, conn, schemas.StreamScores, "test-poison")
	dl, err := conn.JS.Stream(ctx, schemas.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{ // by message id: reason, subject
		"dead/MEDGYM_SCORES/1": {"second reason for a", schemas.EpisodeScored.For("r1")},
		"dead/MEDGYM_SCORES/2": {"first reason", "medgym.episode.requested.r1"},
	}
	if n := streamMsgs(t, ctx, conn, schemas.StreamDeadLetter); n != 2 {
		t.Fatalf("%d dead letters, want 2", n)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		raw, err := dl.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		id := raw.Header.Get(jetstream.MsgIDHeader)
		got := [2]string{raw.Header.Get(bus.HeaderDeadReason), raw.Header.Get(bus.HeaderDeadSubject)}
		if w, ok := want[id]; !ok || got != w {
			t.Errorf("dead letter %s: reason, subject = %q, want %q", id, got, w)
		}
		delete(want, id)
	}
	// A second copy of the same message (a redelivery that poisons again)
	// is dropped by the stream's duplicate window.
	dup := nats.NewMsg(schemas.DeadLetter.For("poison"))
	dup.Data = data
	dup.Header.Set(jetstream.MsgIDHeader, "dead/MEDGYM_SCORES/1")
	ack, err := conn.JS.PublishMsg(ctx, dup)
	if err != nil || !ack.Duplicate {
		t.Fatalf("re-publishing dead letter 1: ack %+v, err %v; want a duplicate", ack, err)
	}
}

// TestDeadLetterStreamBounded: the dead-letter stream has the documented
// age, size and count limits and discards the oldest.
func TestDeadLetterStreamBounded(t *testing.T) {
	conn, ctx := setup(t)
	s, err := conn.JS.Stream(ctx, schemas.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxAge != bus.DefaultDeadLetterMaxAge || cfg.MaxBytes != bus.DefaultDeadLetterMaxBytes ||
		cfg.MaxMsgs != bus.DefaultDeadLetterMaxMsgs || cfg.Discard != jetstream.DiscardOld {
		t.Fatalf("dead-letter stream limits: age %v, bytes %d, msgs %d, discard %v", cfg.MaxAge, cfg.MaxBytes, cfg.MaxMsgs, cfg.Discard)
	}
	// A small bound holds: the stream never exceeds it.
	if err := bus.EnsureStreams(ctx, conn.JS, bus.StreamOptions{Memory: true, DeadLetterMaxMsgs: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := conn.Publish(ctx, schemas.DeadLetter.For("poison"), fmt.Sprint(i), score(fmt.Sprint("e", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamMsgs(t, ctx, conn, schemas.StreamDeadLetter); n != 3 {
		t.Fatalf("dead-letter stream bounded at 3 holds %d", n)
	}
}

// TestJunkLogIsRateLimited: a flood of junk logs one line per
// JunkLogInterval per handler, however many messages arrive, while the
// counter counts each one.
func TestJunkLogIsRateLimited(t *testing.T) {
	conn, ctx := setup(t)
	var buf syncBuf
	rt, err := bus.NewRouter(conn, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rt.Metrics = bus.NewMetrics()
	err = bus.Handle(rt, "scores", bus.HandlerOptions{Concurrency: 8, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: "test-flood", Subject: schemas.EpisodeScored}},
		func(context.Context, schemas.Score) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop := runRouter(t, ctx, rt)
	defer stop()
	const n = 100
	for range n {
		if _, err := conn.JS.Publish(ctx, schemas.EpisodeScored.For("r1"), []byte("[]")); err != nil {
			t.Fatal(err)
		}
	}
	drained(t, ctx, conn, schemas.StreamScores, "test-flood")
	if got := rt.Metrics.Junk("scores", bus.JunkUndecodable); got != n {
		t.Fatalf("junk counted %v, want %d", got, n)
	}
	lines := strings.Count(buf.String(), "junk message acked and dropped")
	most := 1 + int(time.Since(start)/bus.JunkLogInterval)
	if lines < 1 || lines > most {
		t.Fatalf("%d junk log lines for %d messages in %s, want 1..%d:\n%s", lines, n, time.Since(start), most, buf.String())
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
