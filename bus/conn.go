package bus

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// Conn is a NATS connection with its JetStream context.
type Conn struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
	// creates: this connection creates the streams and durable consumers
	// it uses rather than verifying them (see ProvisionMode).
	creates bool
	refused *refusals

	blobs blobs
}

// TLS configures TLS to the NATS server. A tls:// URL turns it on with the
// system's roots (SSL_CERT_FILE adds a CA); CAFile trusts a private CA and
// turns it on for a nats:// URL too; CertFile and KeyFile present a client
// certificate (servers with verify: true).
type TLS struct {
	CAFile, CertFile, KeyFile string
}

// RegisterFlags adds --nats-ca, --nats-cert and --nats-key to fs, with the
// environment variables MEDGYM_NATS_CA, MEDGYM_NATS_CERT and MEDGYM_NATS_KEY
// as defaults.
func (t *TLS) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&t.CAFile, "nats-ca", getenv("MEDGYM_NATS_CA"), "PEM file of the CA that signed the NATS server's certificate; turns TLS on (env MEDGYM_NATS_CA)")
	fs.StringVar(&t.CertFile, "nats-cert", getenv("MEDGYM_NATS_CERT"), "PEM client certificate for NATS servers that verify clients (env MEDGYM_NATS_CERT)")
	fs.StringVar(&t.KeyFile, "nats-key", getenv("MEDGYM_NATS_KEY"), "PEM key of --nats-cert (env MEDGYM_NATS_KEY)")
}

func (t TLS) options() ([]nats.Option, error) {
	var opts []nats.Option
	if t.CAFile != "" {
		opts = append(opts, nats.RootCAs(t.CAFile))
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		opts = append(opts, nats.ClientCert(t.CertFile, t.KeyFile))
	case t.CertFile != "" || t.KeyFile != "":
		return nil, errors.New("nats TLS: a client certificate needs both --nats-cert and --nats-key")
	}
	return opts, nil
}

// ConnectOption tunes Connect.
type ConnectOption func(*connectConfig)

type connectConfig struct {
	tls  TLS
	auth Auth
	// inProcess: connect to this server in the process, not to the URL.
	inProcess InProcessServer

	// wait: retry a server not reachable yet, for at most waitFor (0:
	// until ctx is done). Unset: fail at once.
	wait    bool
	waitFor time.Duration

	provision ProvisionMode
	// role: the deploy/nats user this connection plays (WithRole), whose
	// inbox prefix it uses when its credentials name no user.
	role string
	// blobBucket: the object store payloads are offloaded to (WithBlobService).
	blobBucket string

	// Start only.
	streams         StreamOptions
	metricsRequired bool
}

// WithTLS connects with t (see TLS).
func WithTLS(t TLS) ConnectOption { return func(c *connectConfig) { c.tls = t } }

// InProcessServer is a NATS server running in this process that hands out
// connections without a socket (the embedded server; nats-server's
// *server.Server is one).
type InProcessServer interface {
	InProcessConn() (net.Conn, error)
}

// InProcessURL is the URL label of a connection made WithInProcess: it
// names no address, and nothing is dialed.
const InProcessURL = "nats://in-process"

// WithInProcess connects to srv, a server in this process started without
// a listener (embedded.Options.InProcess), instead of dialing the URL,
// which is then only a label (InProcessURL): no other process can reach
// such a server, and its connections use no file descriptor.
func WithInProcess(srv InProcessServer) ConnectOption {
	return func(c *connectConfig) { c.inProcess = srv }
}

// WithConnectTimeout makes Connect (and Start) wait for a server that is
// not reachable yet instead of failing at once: it retries with backoff
// (what it does after a disconnect), logging while it waits, for at most d
// (0: until ctx is done). A certificate the CA does not vouch for still
// fails at once. Without it, an unreachable server is an immediate error.
func WithConnectTimeout(d time.Duration) ConnectOption {
	return func(c *connectConfig) { c.wait, c.waitFor = true, d }
}

// reconnectDelay is the backoff between two rounds over the server list,
// for the first connection (WithConnectTimeout) as after a disconnect:
// 250 ms doubling to 2 s, plus up to 25 % jitter.
func reconnectDelay(attempts int) time.Duration {
	d := 250 * time.Millisecond << min(max(attempts-1, 0), 3)
	return d + rand.N(d/4+1)
}

// Connect dials url and returns a connection that reconnects forever. The
// URL's credentials never reach a log or an error (schemas.RedactURL).
// WithTLS and WithAuth (credentials, see AuthFromEnv) configure it;
// WithConnectTimeout waits for a server that is not up yet.
func Connect(ctx context.Context, url, name string, log *slog.Logger, opts ...ConnectOption) (*Conn, error) {
	var cfg connectConfig
	for _, o := range opts {
		o(&cfg)
	}
	conn, err := dial(url, name, log, cfg)
	if err != nil {
		return nil, err
	}
	if err := conn.ready(ctx, url, cfg); err != nil {
		conn.nc.Close()
		return nil, err
	}
	return conn, nil
}

// dial creates the connection; with cfg.wait it may not be connected yet
// (see ready).
func dial(url, name string, log *slog.Logger, cfg connectConfig) (*Conn, error) {
	tlsOpts, err := cfg.tls.options()
	if err != nil {
		return nil, err
	}
	authOpts, err := cfg.auth.options()
	if err != nil {
		return nil, err
	}
	if owner, err := cfg.inboxOwner(); err != nil {
		return nil, err
	} else if owner != "" {
		authOpts = append(authOpts, nats.CustomInboxPrefix(InboxPrefix(owner)))
	}
	refused := &refusals{}
	nopts := append(append(tlsOpts, authOpts...),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.RetryOnFailedConnect(cfg.wait),
		nats.InProcessServer(cfg.inProcess),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", schemas.RedactURL(c.ConnectedUrl())) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			if isPermissionViolation(err) {
				refused.note(err)
				if isOrderedCleanup(err) {
					log.Debug("nats refused deleting a consumer; it expires once inactive", "err", err)
					return
				}
				log.Error("nats refused an operation this user is not allowed (see deploy/nats)", "auth", cfg.auth.String(), "subscription", subj, "err", err)
				return
			}
			log.Warn("nats async error", "subscription", subj, "err", err)
		}),
	)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, connectError(url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream on %s: %w", schemas.RedactURL(url), err)
	}
	return &Conn{nc: nc, js: js, log: log, creates: cfg.provision.creates(url, cfg.auth), refused: refused, blobs: blobs{bucket: cfg.blobBucket}}, nil
}

func connectError(url string, err error) error {
	return fmt.Errorf("connect to NATS at %s: %w (is nats-server running with -js? use --nats to point elsewhere)", schemas.RedactURL(url), err)
}

// ready waits until the connection is up (cfg.wait: for at most
// cfg.waitFor, logging while it waits) and checks that JetStream is on.
func (c *Conn) ready(ctx context.Context, url string, cfg connectConfig) error {
	if err := c.waitConnected(ctx, url, cfg.waitFor); err != nil {
		return err
	}
	shown := schemas.RedactURL(url)
	if _, err := c.js.AccountInfo(ctx); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("NATS at %s has JetStream disabled: start nats-server with -js", shown)
		}
		return fmt.Errorf("jetstream account info on %s: %w", shown, err)
	}
	return nil
}

// waitLogEvery is how often a connection still waiting for its first
// server says so.
const waitLogEvery = 10 * time.Second

// waitConnected returns once the connection is up, or an error when d
// (0: no bound) or ctx runs out, the connection is closed, or the server's
// certificate is refused (retrying cannot fix that).
func (c *Conn) waitConnected(ctx context.Context, url string, d time.Duration) error {
	if c.nc.IsConnected() {
		return nil
	}
	start := time.Now()
	shown := schemas.RedactURL(url)
	var deadline <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		deadline = t.C
	}
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	var logged time.Time
	for {
		last := c.nc.LastError()
		switch {
		case c.nc.IsConnected():
			c.log.Info("nats connected", "url", schemas.RedactURL(c.nc.ConnectedUrl()), "waited", time.Since(start).Round(time.Millisecond))
			return nil
		case c.nc.IsClosed():
			return connectError(url, cmp.Or(last, nats.ErrConnectionClosed))
		case isCertificateError(last):
			return connectError(url, last)
		case time.Since(logged) >= waitLogEvery:
			logged = time.Now()
			c.log.Warn("waiting for NATS: not reachable yet, retrying (--connect-timeout bounds the wait; /healthz answers 503 meanwhile)",
				"url", shown, "waited", time.Since(start).Round(time.Second), "err", last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect to NATS at %s: %w after %s (last error: %v)", shown, ctx.Err(), time.Since(start).Round(time.Second), last)
		case <-deadline:
			return connectError(url, fmt.Errorf("not reachable within --connect-timeout %s (last error: %v)", d, cmp.Or(last, nats.ErrNoServers)))
		case <-poll.C:
		}
	}
}

// isCertificateError says whether err is a TLS certificate the client
// refused: a wrong CA or host name, which no retry will fix.
func isCertificateError(err error) bool {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var tv *tls.CertificateVerificationError
	return err != nil && (errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &tv))
}

// reconnects is how many times the connection has reconnected.
func (c *Conn) reconnects() uint64 { return c.nc.Stats().Reconnects }

// Close drains the connection (pending publishes and acks are flushed).
func (c *Conn) Close() {
	if c == nil || c.nc == nil {
		return
	}
	if err := c.nc.Drain(); err != nil {
		c.nc.Close()
		return
	}
	for c.nc.IsDraining() {
		time.Sleep(10 * time.Millisecond)
	}
}

// Publish validates v, encodes it as JSON and publishes it to subject with
// msgID as its Nats-Msg-Id, waiting for the stream's ack. A duplicate (same
// msgID within the duplicate window) is not an error. A payload over
// InlineMax travels through the blob store (see blob.go).
func (c *Conn) Publish(ctx context.Context, subject, msgID string, v schemas.Validator) error {
	data, err := schemas.Encode(v)
	if err != nil {
		return Permanent(err)
	}
	msg := nats.NewMsg(subject)
	if err := c.offload(ctx, msg, msgID, data); err != nil {
		return fmt.Errorf("publish %s (%s): %w", subject, msgID, err)
	}
	if msgID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	pctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	if _, err := c.js.PublishMsg(pctx, msg); err != nil {
		return fmt.Errorf("publish %s (%s): %w", subject, msgID, err)
	}
	return nil
}

// Start is what every service's main does first: connect to url (one URL
// or several seeds, comma-separated; WithConnectTimeout waits for it),
// create the streams and buckets (WithStreams: replicas and placement) or,
// on a server with users, verify that `medgym nats provision` did
// (PrepareStreams, WithProvision), and serve /metrics and /healthz on
// metricsAddr (empty: none; a port of 0 picks a free one, which is logged).
// A metrics address that cannot be bound (another worker of the same kind
// on this host holds the default port) is a warning and the service runs
// without metrics, unless WithMetricsRequired makes it an error. Close the
// returned connection when done.
func Start(ctx context.Context, url, name, metricsAddr string, log *slog.Logger, opts ...ConnectOption) (*Conn, *Metrics, error) {
	var cfg connectConfig
	for _, o := range opts {
		o(&cfg)
	}
	conn, err := dial(url, name, log, cfg)
	if err != nil {
		return nil, nil, err
	}
	// /healthz is served while the connection waits for its server
	// (WithConnectTimeout) and answers 503 until the streams exist.
	m := NewMetrics()
	m.starting.Store(true)
	// The metrics server stops with ctx, or at once when Start fails.
	mctx, stopMetrics := context.WithCancel(ctx)
	fail := func(err error) (*Conn, *Metrics, error) {
		stopMetrics()
		return nil, nil, err
	}
	context.AfterFunc(ctx, stopMetrics)
	if err := m.Serve(mctx, metricsAddr, conn, log); err != nil {
		if cfg.metricsRequired {
			conn.nc.Close()
			return fail(fmt.Errorf("%w (--metrics-required; --metrics 127.0.0.1:0 picks a free port)", err))
		}
		log.Warn("running without /metrics and /healthz: the metrics address is taken (another process of this kind on this host?); set --metrics to a free address, or 127.0.0.1:0 for any free port, or --metrics-required to make this an error",
			"addr", metricsAddr, "err", err)
	}
	if err := conn.ready(ctx, url, cfg); err != nil {
		conn.nc.Close()
		return fail(err)
	}
	if err := PrepareStreams(ctx, conn, cfg.streams); err != nil {
		conn.Close()
		return fail(err)
	}
	m.starting.Store(false)
	return conn, m, nil
}

// WithStreams makes Start create the streams and buckets with o (replicas,
// placement; see StreamOptions.RegisterFlags).
func WithStreams(o StreamOptions) ConnectOption {
	return func(c *connectConfig) { c.streams = o }
}

// WithMetricsRequired makes a metrics address Start cannot bind an error
// instead of a warning.
func WithMetricsRequired(required bool) ConnectOption {
	return func(c *connectConfig) { c.metricsRequired = required }
}
