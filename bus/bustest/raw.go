package bustest

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/medgym/medgym/bus"
)

// Raw is a bare NATS connection as one user, for tests that send what
// medgym never does: a request whose reply subject is a stream's, a
// publish with a rollup header, floods of subscriptions and connections.
// It does not reconnect; the server's asynchronous errors (a permissions
// violation, a limit) arrive on Errors.
type Raw struct {
	nc   *nats.Conn
	errs chan error
}

// DialRaw connects to url as user with password, its inboxes under the
// user's prefix (bus.InboxPrefix), as medgym's connections.
func DialRaw(url, user, password string) (*Raw, error) {
	return DialRawInbox(url, user, password, bus.InboxPrefix(user))
}

// DialRawInbox is DialRaw with its inboxes under prefix.
func DialRawInbox(url, user, password, prefix string) (*Raw, error) {
	r := &Raw{errs: make(chan error, 64)}
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.NoReconnect(), nats.CustomInboxPrefix(prefix),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case r.errs <- err:
			default:
			}
		}))
	if err != nil {
		return nil, err
	}
	r.nc = nc
	return r, nil
}

// Close closes the connection.
func (r *Raw) Close() { r.nc.Close() }

// Errors are the server's asynchronous errors.
func (r *Raw) Errors() <-chan error { return r.errs }

// Flush waits until the server has processed what was sent.
func (r *Raw) Flush() error { return r.nc.Flush() }

// Request sends body to subject and waits for the answer.
func (r *Raw) Request(subject string, body []byte, timeout time.Duration) ([]byte, error) {
	m, err := r.nc.Request(subject, body, timeout)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// PublishRequest sends body to subject with reply as its reply subject.
func (r *Raw) PublishRequest(subject, reply string, body []byte) error {
	return r.nc.PublishRequest(subject, reply, body)
}

// PublishHeaders publishes body on subject with headers.
func (r *Raw) PublishHeaders(subject string, headers map[string]string, body []byte) error {
	m := nats.NewMsg(subject)
	for k, v := range headers {
		m.Header.Set(k, v)
	}
	m.Data = body
	return r.nc.PublishMsg(m)
}

// Subscribe subscribes to subject, dropping what arrives.
func (r *Raw) Subscribe(subject string) error {
	_, err := r.nc.Subscribe(subject, func(*nats.Msg) {})
	return err
}

// Listen subscribes to subject; next waits up to timeout for the next
// message's body.
func (r *Raw) Listen(subject string) (next func(timeout time.Duration) ([]byte, error), err error) {
	sub, err := r.nc.SubscribeSync(subject)
	if err != nil {
		return nil, err
	}
	if err := r.nc.Flush(); err != nil {
		return nil, err
	}
	return func(timeout time.Duration) ([]byte, error) {
		m, err := sub.NextMsg(timeout)
		if err != nil {
			return nil, err
		}
		return m.Data, nil
	}, nil
}

// Capture subscribes to subject and keeps what arrives; got returns the
// messages (subject and body) this connection has read so far: a
// request of its own answered after another's (Request) is the barrier
// that makes "so far" include everything sent to it before.
func (r *Raw) Capture(subject string) (got func() []string, err error) {
	sub, err := r.nc.SubscribeSync(subject)
	if err != nil {
		return nil, err
	}
	var seen []string
	return func() []string {
		for {
			n, _, err := sub.Pending()
			if err != nil || n == 0 {
				return seen
			}
			m, err := sub.NextMsg(time.Second)
			if err != nil {
				return seen
			}
			seen = append(seen, m.Subject+" "+string(m.Data))
		}
	}, nil
}
