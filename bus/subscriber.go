package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// subscriber is a Watermill message.Subscriber over one JetStream durable
// pull consumer. We use it instead of watermill-nats' jetstream subscriber
// (v2.1.3, documented as beta) because that one closes its output channel
// from one goroutine while another may still send on it (a panic the race
// detector found at shutdown), drains the shared NATS connection on Close,
// and hides the JetStream delivery, so handlers could not send in-progress
// acks or see the delivery count. Here one goroutine owns the output
// channel, the delivery travels in the message context, and Close leaves
// the connection alone. See docs/adr/0002-own-jetstream-subscriber.md.
type subscriber struct {
	cons     jetstream.Consumer
	log      *slog.Logger
	nakDelay func(delivered uint64) time.Duration
	// payload reads a message's payload (Conn.Payload: offloaded payloads
	// come from the blob store); nil means the message body.
	payload func(context.Context, jetstream.Msg) ([]byte, error)
	// reconnects counts the connection's reconnects (nil: never renew the
	// pull iterator; see Subscribe).
	reconnects func() uint64
	renewals   atomic.Int64  // pull iterators replaced after a reconnect
	check      time.Duration // reconnectCheck, shorter in tests

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

func newSubscriber(cons jetstream.Consumer, log *slog.Logger, nakDelay func(uint64) time.Duration) *subscriber {
	return &subscriber{cons: cons, log: log, nakDelay: nakDelay, closing: make(chan struct{}), check: reconnectCheck}
}

// pullExpiry is how long one pull request waits on the server (see Subscribe).
const pullExpiry = 10 * time.Second

type deliveryKey struct{}

type payloadKey struct{}

// payloadOf is the payload of a message being handled: the offloaded one
// the subscriber fetched, else the body.
func payloadOf(msg *message.Message) []byte {
	if p, ok := msg.Context().Value(payloadKey{}).([]byte); ok {
		return p
	}
	return msg.Payload
}

// Delivery returns the JetStream message being handled, if any.
func Delivery(ctx context.Context) (jetstream.Msg, bool) {
	m, ok := ctx.Value(deliveryKey{}).(jetstream.Msg)
	return m, ok
}

// Subscribe starts pulling one message at a time. The topic is only a label:
// the consumer's filter subject decides what arrives.
//
// After the connection reconnects, the slot replaces its pull iterator with
// a new one (the watcher below looks every check): a fresh iterator sends a
// fresh pull request to whatever server now holds the consumer, whatever
// the old one's accounting of outstanding pulls says. A message the old
// pull had already been sent and nobody read is redelivered after AckWait,
// as any unacked message is. Next itself blocks without a deadline, so
// nats.go's own recovery (two missed heartbeats: pull again) stays intact.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	sl := &slot{s: s, topic: topic}
	var err error
	if sl.it, sl.gen, err = s.messages(); err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	stop := make(chan struct{})
	s.wg.Add(2)
	go func() { // stops the iterator, which unblocks Next: at the end, or to renew it
		defer s.wg.Done()
		var tick <-chan time.Time
		if s.reconnects != nil {
			t := time.NewTicker(s.check)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
			case <-s.closing:
			case <-stop:
			case <-tick:
				sl.checkReconnect()
				continue
			}
			sl.stop()
			return
		}
	}()
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer close(stop)
		for {
			jm, err := sl.current().Next()
			if err != nil {
				if ctx.Err() != nil || s.isClosing() {
					return
				}
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					if errors.Is(err, nats.ErrConnectionClosed) || !sl.renew(ctx) {
						return
					}
					continue
				}
				// A terminal status (the consumer deleted, a bad
				// request) has stopped the iterator: the next Next says
				// it is closed, and the slot renews it.
				s.log.Warn("pull next message", "topic", topic, "err", err)
				continue
			}
			if !s.deliver(ctx, out, jm) {
				return
			}
		}
	}()
	return out, nil
}

// slot is one subscription's pull iterator, shared by the goroutine that
// pulls from it and the watcher that stops it.
type slot struct {
	s     *subscriber
	topic string

	mu       sync.Mutex
	it       jetstream.MessagesContext
	gen      uint64 // the connection's reconnect count when it was opened
	stopped  bool   // the subscription ended
	renewing bool   // stopped by the watcher, to be replaced
}

func (sl *slot) current() jetstream.MessagesContext {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.it
}

// stop ends the slot: its iterator stops and is not renewed.
func (sl *slot) stop() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.stopped = true
	sl.it.Stop()
}

// checkReconnect stops the iterator, to be renewed, when the connection
// has reconnected since it was opened.
func (sl *slot) checkReconnect() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if !sl.renewing && sl.s.reconnects() != sl.gen {
		sl.renewing = true
		sl.it.Stop()
	}
}

// renew replaces an iterator that closed: the watcher stopped it after a
// reconnect, or the server ended it (a terminal status: the consumer was
// deleted, by a provisioner that re-creates it or across a restart, or a
// bad request), which is renewed after one check interval, so a slot
// never ends while its subscription lasts: a slot that ended would leave
// its share of the messages unpulled for good. false means the slot ends
// (its subscription stopped).
func (sl *slot) renew(ctx context.Context) bool {
	s := sl.s
	sl.mu.Lock()
	byServer := !sl.renewing && !sl.stopped
	sl.renewing = sl.renewing || byServer
	sl.mu.Unlock()
	if byServer {
		s.log.Warn("pull iterator ended by the server; opening a new one", "topic", sl.topic, "after", s.check)
		select {
		case <-ctx.Done():
			return false
		case <-s.closing:
			return false
		case <-time.After(s.check):
		}
	}
	for {
		sl.mu.Lock()
		if sl.stopped || !sl.renewing {
			sl.mu.Unlock()
			return false
		}
		next, gen, err := s.messages()
		if err == nil {
			sl.it, sl.gen, sl.renewing = next, gen, false
			sl.mu.Unlock()
			s.renewals.Add(1)
			s.log.Debug("pull iterator renewed after reconnect", "topic", sl.topic)
			return true
		}
		sl.mu.Unlock()
		s.log.Warn("renew pull iterator after reconnect", "topic", sl.topic, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-s.closing:
			return false
		case <-time.After(s.check):
		}
	}
}

// reconnectCheck is how often a slot's watcher looks whether the
// connection has reconnected (see Subscribe).
const reconnectCheck = time.Second

// messages opens a pull iterator and returns it with the connection's
// reconnect count at that moment.
//
// PullExpiry: nats.go v1.55's iterator skips the next pull request when
// its previous one is still being sent as the message arrives (a race
// between Next's checkPending and pullMessages' fetchInProgress), and then
// waits for two missed heartbeats, half the expiry each, before it asks
// again. With the default 30 s expiry a fast handler on one slot sometimes
// stalled for 30 s; 10 s bounds that stall at 10 s for a pull request
// every 10 s per idle slot.
func (s *subscriber) messages() (jetstream.MessagesContext, uint64, error) {
	var gen uint64
	if s.reconnects != nil {
		gen = s.reconnects()
	}
	it, err := s.cons.Messages(jetstream.PullMaxMessages(1), jetstream.PullExpiry(pullExpiry))
	return it, gen, err
}

// deliver hands one message to the router and settles it; false means stop.
func (s *subscriber) deliver(ctx context.Context, out chan<- *message.Message, jm jetstream.Msg) bool {
	// An offloaded payload travels in the context; the Watermill message
	// keeps the empty body and the Medgym-Blob header, so a dead-letter copy
	// stays a small pointer to the same object.
	base := context.WithValue(ctx, deliveryKey{}, jm)
	if s.payload != nil && jm.Headers().Get(HeaderBlob) != "" {
		data, err := s.payload(ctx, jm)
		if err != nil {
			s.settleUnread(jm, err)
			return ctx.Err() == nil && !s.isClosing()
		}
		base = context.WithValue(base, payloadKey{}, data)
	}
	wm := message.NewMessage(watermill.NewUUID(), jm.Data())
	for k, v := range jm.Headers() {
		if k == nats.MsgIdHdr || len(v) == 0 {
			continue
		}
		wm.Metadata.Set(k, v[0])
	}
	mctx, cancel := context.WithCancel(base)
	defer cancel()
	wm.SetContext(mctx)
	select {
	case out <- wm:
	case <-ctx.Done():
		return false // not acked: JetStream redelivers it
	case <-s.closing:
		return false
	}
	select {
	case <-wm.Acked():
		// Bounded: an ack whose confirmation was lost with the connection
		// would otherwise hold this slot until ctx's deadline, pulling
		// nothing meanwhile (see requestTimeout).
		actx, cancel := bounded(ctx, requestTimeout)
		err := jm.DoubleAck(actx)
		cancel()
		if err != nil {
			s.log.Warn("ack not confirmed; unless the server took it, the message will be redelivered", "subject", jm.Subject(), "err", err)
		}
	case <-wm.Nacked():
		var n uint64 = 1
		if md, err := jm.Metadata(); err == nil {
			n = md.NumDelivered
		}
		if err := jm.NakWithDelay(s.nakDelay(n)); err != nil {
			s.log.Warn("nak failed", "subject", jm.Subject(), "err", err)
		}
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
	return true
}

// settleUnread settles a message whose offloaded payload could not be
// read: a missing blob ends it (a dead letter through the terminated
// advisory), anything else is retried later.
func (s *subscriber) settleUnread(jm jetstream.Msg, err error) {
	if IsPermanent(err) {
		s.log.Error("message payload is gone; terminating it", "subject", jm.Subject(), "err", err)
		if terr := jm.TermWithReason(err.Error()); terr != nil {
			s.log.Warn("term failed", "subject", jm.Subject(), "err", terr)
		}
		return
	}
	var n uint64 = 1
	if md, merr := jm.Metadata(); merr == nil {
		n = md.NumDelivered
	}
	s.log.Warn("read offloaded payload; retrying", "subject", jm.Subject(), "delivery", n, "err", err)
	if nerr := jm.NakWithDelay(s.nakDelay(n)); nerr != nil {
		s.log.Warn("nak failed", "subject", jm.Subject(), "err", nerr)
	}
}

func (s *subscriber) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// Close stops every subscription; unsettled messages are redelivered.
func (s *subscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.wg.Wait()
	return nil
}
