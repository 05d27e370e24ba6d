package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// Dead-letter headers set on messages moved to schemas.DeadLetter.
const (
	HeaderDeadReason  = middleware.ReasonForPoisonedKey
	HeaderDeadSubject = "medgym_dead_subject"
)

// Router runs typed handlers over JetStream durable consumers with
// Watermill's Router.
type Router struct {
	// Metrics, when set before handlers are added, measures them.
	Metrics *Metrics

	conn *Conn
	log  *slog.Logger
	junk *junkLog
	r    *message.Router
	// storageRetry paces a handler's attempts while JetStream's store is
	// full (see whileStorageFull).
	storageRetry storageRetry
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
	r.AddMiddleware(middleware.Recoverer)
	return &Router{conn: conn, log: log, junk: newJunkLog(log, JunkLogInterval), r: r, storageRetry: defaultStorageRetry}, nil
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
// A payload that is not a JSON object, or does not decode or validate, is
// junk (see Junk).
func Handle[In schemas.Validator](rt *Router, name string, o HandlerOptions, h func(ctx context.Context, in In) error) error {
	o.ConsumerOptions = o.ConsumerOptions.withDefaults()
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	cons, err := rt.consumer(o.ConsumerOptions)
	if err != nil {
		return err
	}
	if !rt.conn.creates {
		// The provisioner's ack wait is the one JetStream applies: keep
		// the handler alive (in-progress acks) by it.
		o.AckWait = cons.CachedInfo().Config.AckWait
	}
	rt.Metrics.track(o.Stream, o.Durable)
	deadLetters := o.Stream == schemas.StreamDeadLetter
	hf := func(msg *message.Message) error {
		ctx := msg.Context()
		if m := rt.Metrics; m != nil {
			m.inflight.WithLabelValues(name).Inc()
			defer m.inflight.WithLabelValues(name).Dec()
		}
		start := time.Now()
		err := rt.call(msg, o.AckWait, func(ctx context.Context) error {
			in, err := decode[In](payloadOf(msg))
			if err != nil {
				return err
			}
			return rt.whileStorageFull(ctx, name, func() error { return h(ctx, in) })
		})
		if deadLetters && IsPermanent(err) && !IsJunk(err) {
			err = Junk(JunkDeadLetter, err) // the dead-letter path never produces dead letters
		}
		rt.Metrics.observe(name, time.Since(start), err)
		return rt.settle(ctx, name, err)
	}
	for i := range o.Concurrency {
		sub := newSubscriber(cons, rt.log, backoff{max: 30 * time.Second}.WaitTime)
		sub.payload = rt.conn.Payload
		sub.reconnects = rt.conn.reconnects
		rt.r.AddConsumerHandler(fmt.Sprintf("%s-%d", name, i), o.Subject.Wildcard(), sub, hf)
	}
	return nil
}

// consumer creates the durable consumer of o, or verifies that the
// provisioner did when the connection does not create (ProvisionMode).
func (rt *Router) consumer(o ConsumerOptions) (jetstream.Consumer, error) {
	if rt.conn.creates {
		return EnsureConsumer(context.Background(), rt.conn, o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return verifyConsumer(ctx, rt.conn, o)
}

// call runs h with the message's headers in its context, sending
// in-progress acks while it runs.
func (rt *Router) call(msg *message.Message, ackWait time.Duration, h func(context.Context) error) error {
	stop := rt.keepAlive(msg.Context(), ackWait)
	defer stop()
	return h(context.WithValue(msg.Context(), metadataKey{}, map[string]string(msg.Metadata)))
}

// settle turns a handler's result into the ack verb: nil acks, an error
// naks (JetStream redelivers it later). Junk is counted, logged
// rate-limited and acked. A permanent failure is copied to the dead-letter
// stream and acked (Handle makes the dead-letter stream's own permanent
// failures junk: the dead-letter path never produces dead letters).
func (rt *Router) settle(ctx context.Context, handler string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	jm, _ := Delivery(ctx)
	subj, n := "", uint64(0)
	if jm != nil {
		subj = jm.Subject()
		if md, mdErr := jm.Metadata(); mdErr == nil {
			n = md.NumDelivered
		}
	}
	if reason, ok := JunkReason(err); ok {
		rt.Metrics.countJunk(handler, reason)
		rt.junk.note(ctx, handler, subj, reason, err)
		return nil
	}
	if !IsPermanent(err) {
		rt.log.WarnContext(ctx, "handler failed", "handler", handler, "subject", subj, "delivery", n, "permanent", false, "err", err)
		return err
	}
	if jm != nil {
		if perr := poison(ctx, rt.conn, jm, err); perr != nil {
			// Not acked: the message comes back and is poisoned again.
			rt.log.WarnContext(ctx, "dead letter: publish", "handler", handler, "subject", subj, "err", perr)
			return perr
		}
	}
	rt.log.ErrorContext(ctx, "handler failed", "handler", handler, "subject", subj, "delivery", n, "permanent", true, "err", err)
	return nil
}

// PoisonKind is the last tokens of the subject a poison copy of a message
// of stream goes to: medgym.deadletter.poison.<stream>. Each service's
// NATS user may publish only the poison subjects of the streams it
// consumes, and PoisonFrom checks the copy names a subject of that stream,
// so a service cannot dead-letter (fail) episodes of another stage.
func PoisonKind(stream string) string { return "poison." + stream }

// PoisonFrom says whether a dead letter delivered on subject may name
// deadSubject (its HeaderDeadSubject) as the subject it was copied from:
// a poison copy of stream S (medgym.deadletter.poison.S) only a subject of
// S. Other dead letters (the dispatcher's, and poison copies of older
// versions, which only the dispatcher's user may publish under deploy/nats)
// are not checked.
func PoisonFrom(subject, deadSubject string) bool {
	stream, ok := strings.CutPrefix(subject, schemas.DeadLetter.For("poison."))
	if !ok {
		return true
	}
	family, ok := schemas.StreamSubjects[stream]
	return ok && strings.HasPrefix(deadSubject, string(family)+".")
}

// poison copies jm to the dead-letter stream. The copy's Nats-Msg-Id is
// deadLetterID of the original, so a redelivered poison message is one
// dead letter, and the first reason and subject recorded stay.
func poison(ctx context.Context, conn *Conn, jm jetstream.Msg, reason error) error {
	md, err := jm.Metadata()
	if err != nil {
		return fmt.Errorf("dead letter: metadata of %s: %w", jm.Subject(), err)
	}
	dl := deadLetterMsg(PoisonKind(md.Stream), jm.Data(), jm.Headers(), jm.Subject(), reason.Error(), md.Stream, md.Sequence.Stream)
	pctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	if _, err := conn.js.PublishMsg(pctx, dl); err != nil {
		return fmt.Errorf("dead letter: publish copy of %s: %w", jm.Subject(), err)
	}
	return nil
}

// deadLetterMsg builds the dead-letter copy of message seq of stream:
// same body and headers (but JetStream's own), the reason and original
// subject unless an earlier dead-lettering recorded them, and the
// deterministic id deadLetterID.
func deadLetterMsg(kind string, data []byte, h nats.Header, subject, reason, stream string, seq uint64) *nats.Msg {
	dl := nats.NewMsg(schemas.DeadLetter.For(kind))
	dl.Data = data
	for k, v := range h {
		if len(v) > 0 && !strings.HasPrefix(k, "Nats-") {
			dl.Header.Set(k, v[0])
		}
	}
	if dl.Header.Get(HeaderDeadReason) == "" {
		dl.Header.Set(HeaderDeadReason, reason)
		dl.Header.Set(HeaderDeadSubject, subject)
	}
	dl.Header.Set(jetstream.MsgIDHeader, deadLetterID(stream, seq))
	return dl
}

// deadLetterID is the Nats-Msg-Id of the dead-letter copy of a stream
// message: deterministic, so the stream keeps one copy per message.
func deadLetterID(stream string, seq uint64) string { return fmt.Sprintf("dead/%s/%d", stream, seq) }

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
