package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/medgym/medgym/schemas/parquet"
)

// RowWriter is what a Batcher flushes to; *Store is one.
type RowWriter interface {
	Write(ctx context.Context, rows []parquet.Row) ([]string, error)
}

// DefaultMaxBytes is a Batcher's default size limit: the approximate bytes
// of buffered rows that trigger a flush.
const DefaultMaxBytes = 64 << 20

// ErrBatcherClosed is passed to done by Add after Close.
var ErrBatcherClosed = errors.New("batcher closed")

type pending struct {
	row  parquet.Row
	done func(error)
}

// Batcher buffers rows and writes them in batches: when maxRows rows or
// about MaxBytes bytes are buffered, or when the oldest buffered row is
// maxAge old. Each flush is one Write, so one file per run and dataset.
// Every row's done callback runs exactly once, after the flush that wrote it
// (nil) or failed (the error), so a caller acks its source message in done
// and naks it on error; nothing is lost.
//
// A Batcher owns one timer; Close stops it and flushes what is left.
type Batcher struct {
	w        RowWriter
	maxRows  int
	maxBytes int
	maxAge   time.Duration
	idle     time.Duration // > 0: also flush once no row arrived for this long
	log      *slog.Logger

	ctx    context.Context // for size- and age-triggered flushes
	cancel context.CancelFunc

	flushMu sync.Mutex // held during a Write; orders flushes

	mu     sync.Mutex // guards the fields below
	buf    []pending
	bytes  int
	timer  *time.Timer
	idleT  *time.Timer
	closed bool
}

// NewBatcher returns a Batcher writing to w. maxRows ≤ 0 means 1000;
// maxAge ≤ 0 means 5 s; log nil means slog.Default().
func NewBatcher(w RowWriter, maxRows int, maxAge time.Duration, log *slog.Logger) *Batcher {
	if maxRows <= 0 {
		maxRows = 1000
	}
	if maxAge <= 0 {
		maxAge = 5 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Batcher{w: w, maxRows: maxRows, maxBytes: DefaultMaxBytes, maxAge: maxAge, log: log, ctx: ctx, cancel: cancel}
}

// WithMaxBytes sets the size limit (≤ 0: DefaultMaxBytes). Call it before
// the first Add.
func (b *Batcher) WithMaxBytes(n int) *Batcher {
	if n <= 0 {
		n = DefaultMaxBytes
	}
	b.maxBytes = n
	return b
}

// WithIdle makes the Batcher also flush once no row arrived for d (≤ 0:
// never; only size and age flush): a row that arrives alone is written
// after d rather than after maxAge, while a steady stream still fills
// batches. Call it before the first Add.
func (b *Batcher) WithIdle(d time.Duration) *Batcher {
	b.idle = max(d, 0)
	return b
}

// Add buffers row; done(err) is called once the row is stored (nil), was
// already stored (nil), or could not be stored (err). When the buffer is
// full, Add flushes it before returning, which pushes back on the caller.
func (b *Batcher) Add(row parquet.Row, done func(err error)) {
	if done == nil {
		done = func(error) {}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		done(ErrBatcherClosed)
		return
	}
	b.buf = append(b.buf, pending{row: row, done: done})
	b.bytes += rowSize(&row)
	if len(b.buf) == 1 {
		b.timer = time.AfterFunc(b.maxAge, b.flushOnAge)
	}
	if b.idle > 0 {
		if b.idleT == nil {
			b.idleT = time.AfterFunc(b.idle, b.flushOnAge)
		} else {
			b.idleT.Reset(b.idle)
		}
	}
	full := len(b.buf) >= b.maxRows || b.bytes >= b.maxBytes
	b.mu.Unlock()
	if full {
		_ = b.Flush(b.ctx)
	}
}

func (b *Batcher) flushOnAge() { _ = b.Flush(b.ctx) }

// Len returns the number of buffered rows.
func (b *Batcher) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}

// Flush writes the buffered rows now and reports each row's result to its
// done callback; it returns the write error, if any.
func (b *Batcher) Flush(ctx context.Context) error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	batch := b.buf
	b.buf, b.bytes = nil, 0
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if b.idleT != nil {
		b.idleT.Stop()
		b.idleT = nil
	}
	b.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	rows := make([]parquet.Row, len(batch))
	for i := range batch {
		rows[i] = batch[i].row
	}
	start := time.Now()
	keys, err := b.w.Write(ctx, rows)
	if err != nil {
		b.log.Warn("trajectory flush failed; rows will be redelivered", "rows", len(rows), "err", err)
	} else {
		b.log.Debug("trajectories flushed", "rows", len(rows), "files", len(keys), "took", time.Since(start))
	}
	for _, p := range batch {
		p.done(err)
	}
	return err
}

// Close flushes the buffered rows with ctx and refuses further rows. A
// flush already running when ctx ends is cancelled.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	stop := context.AfterFunc(ctx, b.cancel)
	defer stop()
	defer b.cancel()
	return b.Flush(ctx)
}

// rowSize approximates a row's encoded size from its variable-length parts.
func rowSize(r *parquet.Row) int {
	n := 256 + len(r.FinalAnswer) + len(r.Error)
	for _, m := range r.Messages {
		n += len(m.Role) + len(m.Content)
	}
	for i := range r.Turns {
		t := &r.Turns[i]
		n += 64 + len(t.RawText) + len(t.Reasoning) + len(t.ParamsJSON) + len(t.ParseError) + len(t.Observation) +
			len(t.Stdout) + len(t.Stderr) + 4*(len(t.PromptTokenIDs)+len(t.CompletionTokenIDs)+len(t.CompletionLogprobs))
	}
	return n
}
