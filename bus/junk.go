package bus

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/medgym/medgym/schemas"
)

// JunkLogInterval is the least time between two junk log lines of one
// handler; the lines in between are counted and reported with the next.
const JunkLogInterval = 10 * time.Second

// decode reads a message body as In. Every failure is Junk: a body that is
// not a JSON object, or not an In, or an invalid In, can never be handled.
func decode[In schemas.Validator](data []byte) (In, error) {
	var zero In
	if b := bytes.TrimLeft(data, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return zero, Junkf(JunkUndecodable, "decode %T: body is not a JSON object (%d bytes)", zero, len(data))
	}
	in, err := schemas.Decode[In](data)
	if err != nil {
		reason := JunkInvalid
		if _, jsonErr := schemas.Decode[jsonOnly](data); jsonErr != nil {
			reason = JunkUndecodable
		}
		return zero, Junk(reason, err)
	}
	return in, nil
}

// jsonOnly accepts any JSON object: it tells undecodable from invalid.
type jsonOnly map[string]any

func (jsonOnly) Validate() error { return nil }

// junkLog logs junk at most once per interval per handler.
type junkLog struct {
	log      *slog.Logger
	interval time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	skip map[string]int
}

func newJunkLog(log *slog.Logger, interval time.Duration) *junkLog {
	return &junkLog{log: log, interval: interval, last: map[string]time.Time{}, skip: map[string]int{}}
}

func (j *junkLog) note(ctx context.Context, handler, subject, reason string, err error) {
	now := time.Now()
	j.mu.Lock()
	if t, ok := j.last[handler]; ok && now.Sub(t) < j.interval {
		j.skip[handler]++
		j.mu.Unlock()
		return
	}
	skipped := j.skip[handler]
	j.last[handler], j.skip[handler] = now, 0
	j.mu.Unlock()
	j.log.WarnContext(ctx, "junk message acked and dropped", "handler", handler, "subject", subject,
		"reason", reason, "err", err, "suppressed_since_last", skipped)
}
