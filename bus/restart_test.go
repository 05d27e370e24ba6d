package bus_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/schemas"
)

// muteProxy forwards TCP connections to a NATS server. mute makes the
// connections open at that moment drop everything the server sends from
// then on (what the client sends still arrives): the answer to a request
// the server is handling is lost, as when the server goes away between
// receiving a request and answering it. Connections made later forward
// both ways.
type muteProxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	conns []*proxied
}

type proxied struct {
	client, server net.Conn
	muted          atomic.Bool
}

func startMuteProxy(t *testing.T, upstream string) *muteProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &muteProxy{ln: ln, upstream: upstream}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
	})
	return p
}

func (p *muteProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *muteProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil { // the server is down: the client retries
			c.Close()
			continue
		}
		pc := &proxied{client: c, server: s}
		p.mu.Lock()
		p.conns = append(p.conns, pc)
		p.mu.Unlock()
		go func() {
			_, _ = io.Copy(s, c)
			s.Close()
			c.Close()
		}()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !pc.muted.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
			s.Close()
		}()
	}
}

func (p *muteProxy) mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.muted.Store(true)
	}
}

// restartRig is an embedded nats-server on a fixed port and file store
// that restart can stop and start again, a connection to it through a
// muteProxy (conn, the one under test) and one straight to it (direct,
// the test's own view).
type restartRig struct {
	t      *testing.T
	dir    string
	port   int
	ns     *server.Server
	proxy  *muteProxy
	conn   *bus.Conn
	direct *bus.Conn
}

func newRestartRig(t *testing.T, ctx context.Context) *restartRig {
	t.Helper()
	r := &restartRig{t: t, dir: t.TempDir(), port: freeTCPPort(t)}
	r.start()
	t.Cleanup(func() { r.ns.Shutdown(); r.ns.WaitForShutdown() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
	r.proxy = startMuteProxy(t, addr)
	var err error
	if r.conn, err = bus.Connect(ctx, r.proxy.url(), "test", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.NATS(r.conn).Close() })
	if r.direct, err = bus.Connect(ctx, "nats://"+addr, "direct", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.NATS(r.direct).Close() })
	if err := bus.EnsureStreams(ctx, r.direct, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *restartRig) start() {
	r.t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: r.dir, Port: r.port})
	if err != nil {
		r.t.Fatal(err)
	}
	r.ns = ns
}

// restart stops the server and starts it again on the same store and
// port; both connections reconnect.
func (r *restartRig) restart() {
	r.t.Helper()
	r.ns.Shutdown()
	r.ns.WaitForShutdown()
	r.start()
}

// ackPending is a durable's messages delivered and not acked, as the
// server sees them (-1 while it cannot tell).
func (r *restartRig) ackPending(ctx context.Context, stream, durable string) int {
	c, err := bus.JetStream(r.direct).Consumer(ctx, stream, durable)
	if err != nil {
		return -1
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return -1
	}
	return ci.NumAckPending
}

// TestHandlerRequestLostInRestart: a handler's key-value write whose
// answer is lost when nats-server restarts (the server stored it, then
// went away before the answer reached the client) fails after the bus's
// request bound, however far off the handler context's deadline (here 5
// minutes, as the services' contexts in the system tests): the handler
// naks and the message is handled again. Before, the write waited for
// that deadline, and the handler's in-progress acks kept the server from
// redelivering the message meanwhile: one message ack-pending for good
// after a restart, and the run stalled.
func TestHandlerRequestLostInRestart(t *testing.T) {
	bus.SetRequestTimeout(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := newRestartRig(t, ctx)
	kv, err := bus.OpenBucket[schemas.Score](ctx, r.conn, schemas.BucketCompletions)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := bus.OpenBucket[schemas.Score](ctx, r.direct, schemas.BucketCompletions)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := bus.NewRouter(r.conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var calls, done atomic.Int32
	err = bus.Handle(rt, "lost", bus.HandlerOptions{Concurrency: 1, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: "lost", Subject: schemas.EpisodeScored, AckWait: 3 * time.Second}},
		func(ctx context.Context, sc schemas.Score) error {
			if calls.Add(1) == 1 {
				close(entered)
				<-release
			}
			if _, err := kv.Put(ctx, sc.EpisodeID, sc); err != nil {
				return err
			}
			done.Add(1)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	defer stop()
	if err := r.direct.Publish(ctx, schemas.EpisodeScored.For("r1"), "e1/scored", score("e1")); err != nil {
		t.Fatal(err)
	}
	<-entered
	r.proxy.mute()
	close(release)
	waitFor(t, 30*time.Second, func() bool { _, _, err := stored.Get(ctx, "e1"); return err == nil })
	r.restart()
	waitFor(t, 60*time.Second, func() bool { return done.Load() == 1 })
	waitFor(t, 30*time.Second, func() bool { return r.ackPending(ctx, schemas.StreamScores, "lost") == 0 })
	if n := calls.Load(); n < 2 {
		t.Fatalf("handler called %d times, want the lost write's message handled again", n)
	}
}

// TestAckLostInRestart: an ack whose confirmation is lost when
// nats-server restarts (the server took the ack, then went away before
// confirming it) fails after the bus's request bound, however far off the
// subscription context's deadline, and the slot pulls the next message.
// Before, the slot waited for that deadline in the ack, pulling nothing:
// a handler with one slot stopped for good after a restart.
func TestAckLostInRestart(t *testing.T) {
	bus.SetRequestTimeout(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := newRestartRig(t, ctx)
	rt, err := bus.NewRouter(r.conn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 10)
	err = bus.Handle(rt, "acklost", bus.HandlerOptions{Concurrency: 1, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamScores, Durable: "acklost", Subject: schemas.EpisodeScored}},
		func(ctx context.Context, sc schemas.Score) error {
			if sc.EpisodeID == "e1" {
				r.proxy.mute() // the ack goes out; its confirmation does not come back
			}
			handled <- sc.EpisodeID
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, ctx, rt)
	defer stop()
	receive := func(want string) {
		t.Helper()
		select {
		case ep := <-handled:
			if ep != want {
				t.Fatalf("handled %s, want %s", ep, want)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s not handled", want)
		}
	}
	if err := r.direct.Publish(ctx, schemas.EpisodeScored.For("r1"), "e1/scored", score("e1")); err != nil {
		t.Fatal(err)
	}
	receive("e1")
	// The server took the ack.
	waitFor(t, 30*time.Second, func() bool { return r.ackPending(ctx, schemas.StreamScores, "acklost") == 0 })
	r.restart()
	if err := r.direct.Publish(ctx, schemas.EpisodeScored.For("r1"), "e2/scored", score("e2")); err != nil {
		t.Fatal(err)
	}
	receive("e2")
}
