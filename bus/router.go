package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/medgym/medgym/schemas"
)

// Dead-letter headers set on messages moved to schemas.DeadLetter.
const (
	HeaderDeadReason  = middleware.ReasonForPoisonedKey
	HeaderDeadSubject = "medgym_dead_subject"
)

// deadLetterPoison is the subject handler failures are moved to.
var deadLetterPoison = string(schemas.DeadLetter) + ".poison"

// Router runs typed handlers over JetStream durable consumers with
// Watermill's Router and middleware.
type Router struct {
	// Metrics, when set before handlers are added, measures them.
	Metrics *Metrics

	conn *Conn
	log  *slog.Logger
	wlog watermill.LoggerAdapter
	r    *message.Router
	pub  message.Publisher
}

// NewRouter returns a Router publishing dead letters through conn.
func NewRouter(conn *Conn, log *slog.Logger) (*Router, error) {
	wlog := watermill.NewSlogLoggerWithLevelMapping(log, map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug, // watermill logs every message at info
	})
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, wlog)
	if err != nil {
		return nil, fmt.Errorf("new router: %w", err)
	}
	pub, err := wjs.NewPublisher(wjs.PublisherConfig{Conn: conn.NC, Logger: wlog})
	if err != nil {
		return nil, fmt.Errorf("new dead-letter publisher: %w", err)
	}
	rt := &Router{conn: conn, log: log, wlog: wlog, r: r, pub: pub}
	poison, err := middleware.PoisonQueueWithFilter(pub, deadLetterPoison, IsPermanent)
	if err != nil {
		return nil, fmt.Errorf("poison queue: %w", err)
	}
	r.AddMiddleware(middleware.Recoverer, poison, rt.logOnce)
	return rt, nil
}

// HandlerOptions configure one handler.
type HandlerOptions struct {
	ConsumerOptions
	// Concurrency is the number of messages handled at once by this
	// process (default 1). Each is its own pull subscription on the shared
	// durable, so processes and goroutines share the work the same way.
	Concurrency int
}

// Handle registers h for messages of type In on the durable consumer in o.
// A payload that does not decode or validate is a dead letter.
func Handle[In schemas.Validator](rt *Router, name string, o HandlerOptions, h func(ctx context.Context, in In) error) error {
	o.ConsumerOptions = o.ConsumerOptions.withDefaults()
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	cons, err := EnsureConsumer(context.Background(), rt.conn.JS, o.ConsumerOptions)
	if err != nil {
		return err
	}
	rt.Metrics.track(o.Stream, o.Durable)
	hf := func(msg *message.Message) (err error) {
		if m := rt.Metrics; m != nil {
			m.inflight.WithLabelValues(name).Inc()
			start := time.Now()
			defer func() {
				m.inflight.WithLabelValues(name).Dec()
				m.observe(name, time.Since(start), err)
			}()
		}
		in, err := schemas.Decode[In](payloadOf(msg))
		if err != nil {
			return Permanent(err)
		}
		stop := rt.keepAlive(msg.Context(), o.AckWait)
		defer stop()
		return h(context.WithValue(msg.Context(), metadataKey{}, map[string]string(msg.Metadata)), in)
	}
	for i := range o.Concurrency {
		sub := newSubscriber(cons, rt.log, backoff{max: 30 * time.Second}.WaitTime)
		sub.payload = rt.conn.Payload
		rt.r.AddConsumerHandler(fmt.Sprintf("%s-%d", name, i), o.Subject.Wildcard(), sub, hf)
	}
	return nil
}

// keepAlive sends in-progress acks every ackWait/3 until stop is called.
func (rt *Router) keepAlive(ctx context.Context, ackWait time.Duration) (stop func()) {
	m, ok := Delivery(ctx)
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := m.InProgress(); err != nil {
					rt.log.Warn("in-progress ack failed", "subject", m.Subject(), "err", err)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// logOnce logs a handler error once, with its delivery count, and forgets
// the delivery afterwards.
func (rt *Router) logOnce(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		m, ok := Delivery(msg.Context())
		if err != nil && !errors.Is(err, context.Canceled) {
			var n uint64
			subj := ""
			if ok {
				subj = m.Subject()
				if md, mdErr := m.Metadata(); mdErr == nil {
					n = md.NumDelivered
				}
			}
			msg.Metadata.Set(HeaderDeadSubject, subj)
			level := slog.LevelWarn
			if IsPermanent(err) {
				level = slog.LevelError
			}
			rt.log.Log(msg.Context(), level, "handler failed", "handler", message.HandlerNameFromCtx(msg.Context()),
				"subject", subj, "delivery", n, "permanent", IsPermanent(err), "err", err)
		}
		return out, err
	}
}

// Run runs the router until ctx is done, then closes it (in-flight handlers
// finish; unacked messages are redelivered elsewhere).
func (rt *Router) Run(ctx context.Context) error {
	if err := rt.r.Run(ctx); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	return nil
}

// Running is closed once every handler is subscribed.
func (rt *Router) Running() chan struct{} { return rt.r.Running() }

// Close stops the router.
func (rt *Router) Close() error { return rt.r.Close() }

// backoff is Watermill's Nak delay: exponential in the delivery count.
type backoff struct{ max time.Duration }

func (b backoff) WaitTime(n uint64) time.Duration {
	d := 500 * time.Millisecond
	for i := uint64(1); i < n && d < b.max; i++ {
		d *= 2
	}
	return min(d, b.max)
}

type metadataKey struct{}

// Metadata returns the message headers of the message being handled (for
// dead letters: HeaderDeadReason and HeaderDeadSubject).
func Metadata(ctx context.Context) map[string]string {
	md, _ := ctx.Value(metadataKey{}).(map[string]string)
	return md
}
