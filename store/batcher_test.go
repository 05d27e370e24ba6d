package store_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
)

// fakeWriter records writes and fails while err is set. It also records
// how many done callbacks had run when each write started.
type fakeWriter struct {
	mu       sync.Mutex
	calls    [][]string
	err      error
	doneSeen []int
	acked    func() int
}

func (f *fakeWriter) Write(_ context.Context, rows []parquet.Row) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.EpisodeID
	}
	f.calls = append(f.calls, ids)
	if f.acked != nil {
		f.doneSeen = append(f.doneSeen, f.acked())
	}
	if f.err != nil {
		return nil, f.err
	}
	return []string{"k"}, nil
}

// results collects done callbacks.
type results struct {
	mu   sync.Mutex
	n    int
	errs map[string]error
	ch   chan string
}

func newResults() *results { return &results{errs: map[string]error{}, ch: make(chan string, 100)} }

func (r *results) done(ep string) func(error) {
	return func(err error) {
		r.mu.Lock()
		r.n++
		r.errs[ep] = err
		r.mu.Unlock()
		r.ch <- ep
	}
}

func (r *results) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestBatcherAcksAfterFlushByCount(t *testing.T) {
	t.Parallel()
	res := newResults()
	w := &fakeWriter{}
	w.acked = res.count
	b := store.NewBatcher(w, 3, time.Hour, quiet())
	b.Add(row("r", "e1", "d", "correct"), res.done("e1"))
	b.Add(row("r", "e2", "d", "correct"), res.done("e2"))
	if res.count() != 0 || b.Len() != 2 {
		t.Fatalf("before the flush: %d acks, %d buffered; want 0, 2", res.count(), b.Len())
	}
	b.Add(row("r", "e3", "d", "correct"), res.done("e3"))
	if res.count() != 3 || b.Len() != 0 {
		t.Fatalf("after the count flush: %d acks, %d buffered; want 3, 0", res.count(), b.Len())
	}
	if len(w.calls) != 1 || strings.Join(w.calls[0], ",") != "e1,e2,e3" || w.doneSeen[0] != 0 {
		t.Errorf("writes %v, acks seen at write time %v; want one write of e1..e3 before any ack", w.calls, w.doneSeen)
	}
	for ep, err := range res.errs {
		if err != nil {
			t.Errorf("%s: %v", ep, err)
		}
	}
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestBatcherFailureNaksEveryRow(t *testing.T) {
	t.Parallel()
	boom := errors.New("store down")
	w := &fakeWriter{err: boom}
	res := newResults()
	b := store.NewBatcher(w, 100, time.Hour, quiet())
	b.Add(row("r", "e1", "d", "correct"), res.done("e1"))
	b.Add(row("r2", "e2", "d", "correct"), res.done("e2"))
	if err := b.Flush(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("flush: %v, want %v", err, boom)
	}
	if res.count() != 2 || !errors.Is(res.errs["e1"], boom) || !errors.Is(res.errs["e2"], boom) {
		t.Fatalf("done results %v; want both rows told %v", res.errs, boom)
	}
	if b.Len() != 0 {
		t.Errorf("failed rows stay buffered (%d); the caller's nak redelivers them", b.Len())
	}
	// Recovery: the redelivered rows are written by the next flush.
	w.mu.Lock()
	w.err = nil
	w.mu.Unlock()
	b.Add(row("r", "e1", "d", "correct"), res.done("e1"))
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res.count() != 3 || res.errs["e1"] != nil {
		t.Errorf("after recovery: %d results, e1 %v", res.count(), res.errs["e1"])
	}
}

func TestBatcherFlushesByAge(t *testing.T) {
	t.Parallel()
	w := &fakeWriter{}
	res := newResults()
	b := store.NewBatcher(w, 100, 20*time.Millisecond, quiet())
	t.Cleanup(func() {
		if err := b.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	b.Add(row("r", "e1", "d", "correct"), res.done("e1"))
	select {
	case ep := <-res.ch:
		if ep != "e1" || res.errs["e1"] != nil {
			t.Errorf("acked %s with %v", ep, res.errs[ep])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("row not flushed by age")
	}
}

// TestBatcherFlushesWhenIdle: with an idle flush, rows that arrive
// together are one batch, written once no row arrived for the idle time,
// long before the (hour-long) age; without one they wait for the age.
func TestBatcherFlushesWhenIdle(t *testing.T) {
	t.Parallel()
	w := &fakeWriter{}
	res := newResults()
	b := store.NewBatcher(w, 100, time.Hour, quiet()).WithIdle(50 * time.Millisecond)
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	b.Add(row("r", "e1", "d", "correct"), res.done("e1"))
	b.Add(row("r", "e2", "d", "correct"), res.done("e2"))
	for range 2 {
		select {
		case <-res.ch:
		case <-time.After(10 * time.Second):
			t.Fatal("rows not flushed once idle")
		}
	}
	w.mu.Lock()
	calls := len(w.calls)
	w.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d writes, want the two rows in one", calls)
	}
	// The positive control: no idle flush, the row waits for its age.
	plain := store.NewBatcher(&fakeWriter{}, 100, time.Hour, quiet())
	t.Cleanup(func() { _ = plain.Close(context.Background()) })
	other := newResults()
	plain.Add(row("r", "e3", "d", "correct"), other.done("e3"))
	time.Sleep(200 * time.Millisecond)
	if other.count() != 0 {
		t.Fatal("a row was flushed without an idle flush, before its age")
	}
}

func TestBatcherFlushesBySize(t *testing.T) {
	t.Parallel()
	w := &fakeWriter{}
	res := newResults()
	b := store.NewBatcher(w, 100, time.Hour, quiet()).WithMaxBytes(10_000)
	big := row("r", "e1", "d", "correct")
	big.Turns[0].Stdout = strings.Repeat("x", 20_000)
	b.Add(big, res.done("e1"))
	if res.count() != 1 {
		t.Errorf("a row over the size limit was not flushed at once")
	}
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestBatcherClose(t *testing.T) {
	t.Parallel()
	w := &fakeWriter{}
	res := newResults()
	b := store.NewBatcher(w, 100, time.Hour, quiet())
	b.Add(row("r", "e1", "d", "correct"), res.done("e1"))
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res.count() != 1 || res.errs["e1"] != nil {
		t.Fatalf("close did not flush: %v", res.errs)
	}
	b.Add(row("r", "e2", "d", "correct"), res.done("e2"))
	if !errors.Is(res.errs["e2"], store.ErrBatcherClosed) {
		t.Errorf("add after close: %v, want ErrBatcherClosed", res.errs["e2"])
	}
}

func TestBatcherWithStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := newResults()
	b := store.NewBatcher(st, 4, time.Hour, quiet())
	// A redelivered duplicate (e1 twice) and two datasets in one flush.
	for _, r := range []parquet.Row{row("r", "e1", "a", "correct"), row("r", "e2", "b", "correct"),
		row("r", "e1", "a", "correct"), row("r", "e3", "a", "incorrect")} {
		b.Add(r, res.done(r.EpisodeID))
	}
	if res.count() != 4 {
		t.Fatalf("%d acks after a full batch, want 4", res.count())
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := st.ReadRun(ctx, "r")
	if err != nil || len(rows) != 3 {
		t.Fatalf("stored %d rows (%v), want 3", len(rows), err)
	}
	dir := t.TempDir()
	if err := st.CopyLocal(ctx, "r", dir); err != nil {
		t.Fatal(err)
	}
	for _, ds := range []string{"a", "b"} {
		if n := countFiles(t, dir+"/trajectories/run=r/dataset="+ds); n != 1 {
			t.Errorf("dataset %s: %d files, want one per flush", ds, n)
		}
	}
}
