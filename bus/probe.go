package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrRefused is the server refusing a publish the connection's user is
// not allowed (a permissions violation).
var ErrRefused = errors.New("refused by the user's permissions")

// refusals hands the server's publish permission violations, which only
// the connection's error handler sees, to the Request waiting on that
// subject.
type refusals struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

var refusedSubject = regexp.MustCompile(`(?i)publish to "([^"]+)"`)

func (r *refusals) note(err error) {
	m := refusedSubject.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.waiting[m[1]]; ok {
		close(ch)
		delete(r.waiting, m[1])
	}
}

func (r *refusals) wait(subject string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting == nil {
		r.waiting = map[string]chan struct{}{}
	}
	r.waiting[subject] = ch
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.waiting[subject] == ch {
			delete(r.waiting, subject)
		}
	}
}

// Request sends body to subject with a reply inbox and returns the first
// reply, or ErrRefused when the server refuses the publish: for tests and
// tools that check what a user may do (a JetStream API verb, a key-value
// or object-store write), which must tell a refusal from an answer
// without waiting out a timeout. One Request per subject at a time.
func (c *Conn) Request(ctx context.Context, subject string, body []byte) ([]byte, error) {
	// nats.go's flush needs a deadline: a command's context (medgym nats
	// provision under a signal context) has none.
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	inbox := c.nc.NewInbox()
	replies := make(chan *nats.Msg, 1)
	sub, err := c.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	refused, done := c.refused.wait(subject)
	defer done()
	if err := c.nc.PublishRequest(subject, inbox, body); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	select {
	case m := <-replies:
		return m.Data, nil
	case <-refused:
		return nil, fmt.Errorf("request %s: %w", subject, ErrRefused)
	case <-ctx.Done():
		return nil, fmt.Errorf("request %s: %w", subject, ctx.Err())
	}
}
