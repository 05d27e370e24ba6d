package bus

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// ProvisionMode says whether a process creates the streams, key-value
// buckets, object store and durable consumers it uses, or only checks that
// they exist as Provision made them (docs/adr/0028-provision-once.md).
type ProvisionMode string

const (
	// ProvisionAuto creates without credentials (the embedded server, a
	// server without authorisation) and verifies with them: on a server
	// with users, only the provisioner (`medgym nats provision`, run as
	// the admin user) may create or change streams and consumers.
	ProvisionAuto ProvisionMode = "auto"
	// ProvisionCreate creates or updates everything (EnsureStreams, and
	// each durable consumer as its handler is added).
	ProvisionCreate ProvisionMode = "create"
	// ProvisionVerify creates nothing: a missing or misconfigured stream,
	// bucket or durable consumer is an error naming it.
	ProvisionVerify ProvisionMode = "verify"
)

// EnvProvision is the environment default of --provision.
const EnvProvision = "MEDGYM_PROVISION"

// Set implements flag.Value.
func (m *ProvisionMode) Set(s string) error {
	switch v := ProvisionMode(strings.TrimSpace(s)); v {
	case "":
		*m = ProvisionAuto
	case ProvisionAuto, ProvisionCreate, ProvisionVerify:
		*m = v
	default:
		return fmt.Errorf("provision %q: want auto, create or verify", s)
	}
	return nil
}

func (m *ProvisionMode) String() string {
	if m == nil || *m == "" {
		return string(ProvisionAuto)
	}
	return string(*m)
}

// RegisterProvisionFlag adds --provision to fs, setting *m, with
// MEDGYM_PROVISION as its default; a bad environment value is left in
// *envErr unless the flag is given.
func RegisterProvisionFlag(fs *flag.FlagSet, getenv func(string) string, m *ProvisionMode, envErr *error) {
	*m = ProvisionAuto
	if v := getenv(EnvProvision); v != "" {
		if err := m.Set(v); err != nil {
			*envErr = fmt.Errorf("%s: %w", EnvProvision, err)
		}
	}
	fs.Var(&provisionValue{m: m, envErr: envErr}, "provision",
		"create: create or update the streams, buckets and durable consumers this process uses; verify: only check they exist as `medgym nats provision` made them; auto: create when connecting without credentials, verify with them (env "+EnvProvision+"; default auto)")
}

type provisionValue struct {
	m      *ProvisionMode
	envErr *error
}

func (v *provisionValue) String() string { return v.m.String() }

func (v *provisionValue) Set(s string) error {
	if err := v.m.Set(s); err != nil {
		return err
	}
	*v.envErr = nil
	return nil
}

// WithProvision sets how the connection treats streams and durable
// consumers (see ProvisionMode; default ProvisionAuto).
func WithProvision(m ProvisionMode) ConnectOption {
	return func(c *connectConfig) { c.provision = m }
}

// creates resolves m for a connection to rawURL with auth.
func (m ProvisionMode) creates(rawURL string, auth Auth) bool {
	switch m {
	case ProvisionCreate:
		return true
	case ProvisionVerify:
		return false
	}
	return auth == (Auth{}) && !urlHasCredentials(rawURL)
}

func urlHasCredentials(raw string) bool {
	for s := range strings.SplitSeq(raw, ",") {
		if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// Creates says whether this connection creates streams and durable
// consumers (ProvisionCreate, or ProvisionAuto without credentials) rather
// than verifying them.
func (c *Conn) Creates() bool { return c.creates }

// ErrNotProvisioned marks a stream, bucket or durable consumer that is
// missing or not configured as Provision makes it.
var ErrNotProvisioned = errors.New("run `medgym nats provision` as the NATS admin user (see deploy/README.md)")

// Durable is a durable consumer Provision creates: the service that owns it
// (the user of deploy/nats that may fetch from it) and its options.
type Durable struct {
	Owner string
	ConsumerOptions
}

// Durables are every durable consumer of the pipeline, with the options
// their services create them with when they provision themselves.
var Durables = []Durable{
	{"dispatcher", ConsumerOptions{Stream: schemas.StreamRuns, Durable: schemas.DurableDispatcherRuns, Subject: schemas.RunSubmitted}},
	{"dispatcher", ConsumerOptions{Stream: schemas.StreamScores, Durable: schemas.DurableDispatcherScores, Subject: schemas.EpisodeScored, MaxDeliver: -1}},
	{"dispatcher", ConsumerOptions{Stream: schemas.StreamDeadLetter, Durable: schemas.DurableDispatcherDead, Subject: schemas.DeadLetter}},
	{"llm-worker", ConsumerOptions{Stream: schemas.StreamEpisodes, Durable: schemas.DurableLLMEpisodes, Subject: schemas.EpisodeRequested}},
	{"llm-worker", ConsumerOptions{Stream: schemas.StreamChecks, Durable: schemas.DurableLLMChecks, Subject: schemas.ObservationChecked}},
	{"sandbox-worker", ConsumerOptions{Stream: schemas.StreamActions, Durable: schemas.DurableSandboxActions, Subject: schemas.ActionRequested}},
	{"verifier", ConsumerOptions{Stream: schemas.StreamObservations, Durable: schemas.DurableVerifierObs, Subject: schemas.ObservationProduced}},
	{"verifier", ConsumerOptions{Stream: schemas.StreamResults, Durable: schemas.DurableVerifierResults, Subject: schemas.EpisodeCompleted, MaxDeliver: -1}},
	{"env-server", ConsumerOptions{Stream: schemas.StreamChecks, Durable: schemas.DurableEnvChecks, Subject: schemas.ObservationChecked}},
	{"env-server", ConsumerOptions{Stream: schemas.StreamScores, Durable: schemas.DurableEnvScores, Subject: schemas.EpisodeScored}},
}

// Provision creates or updates every stream, key-value bucket, the object
// store (EnsureStreams) and every durable consumer (Durables). It is what
// `medgym nats provision` runs, as the one user allowed to.
func Provision(ctx context.Context, c *Conn, o StreamOptions) error {
	// A user without the right gets no answer from JetStream but an
	// asynchronous permissions violation, which a request would wait out:
	// ask once with a body the server refuses harmlessly (a stream name
	// that does not match the subject's) and stop at the violation.
	if _, err := c.Request(ctx, "$JS.API.STREAM.UPDATE."+schemas.StreamRuns, []byte(`{"name":"-"}`)); errors.Is(err, ErrRefused) {
		return fmt.Errorf("this NATS user may not create or update streams: %w", ErrNotProvisioned)
	} else if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	if err := EnsureStreams(ctx, c, o); err != nil {
		return err
	}
	for _, d := range Durables {
		if _, err := EnsureConsumer(ctx, c, d.ConsumerOptions); err != nil {
			return err
		}
	}
	return nil
}

// PrepareStreams is what a process does at start with the streams:
// EnsureStreams when the connection creates (Creates), VerifyStreams when
// it does not.
func PrepareStreams(ctx context.Context, c *Conn, o StreamOptions) error {
	if c.creates {
		return EnsureStreams(ctx, c, o)
	}
	return VerifyStreams(ctx, c, o)
}

// VerifyStreams checks, creating nothing, that every stream, key-value
// bucket and the object store exist with the settings EnsureStreams gives
// them (replicas and placement aside) and nothing that would redirect or
// drop their messages: no sources, mirror, subject transform, republish,
// sealing, or tighter limits. An error wraps ErrNotProvisioned and names
// what is wrong.
func VerifyStreams(ctx context.Context, c *Conn, o StreamOptions) error {
	o = o.withDefaults()
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range schemas.StreamSubjects {
			if !yield(n) {
				return
			}
		}
	}) {
		want := streamConfig(name, schemas.StreamSubjects[name], o)
		if err := verifyStream(ctx, c.js, "stream", name, func(have jetstream.StreamConfig) string {
			if !sameStream(have, want) {
				return fmt.Sprintf("subjects %v, max age %s, limits %d msgs/%d bytes (want %v, %s, %d/%d)",
					have.Subjects, have.MaxAge, have.MaxMsgs, have.MaxBytes, want.Subjects, want.MaxAge, want.MaxMsgs, want.MaxBytes)
			}
			return ""
		}); err != nil {
			return err
		}
	}
	for _, b := range kvBuckets {
		if err := verifyStream(ctx, c.js, "key-value bucket", "KV_"+b.name, func(have jetstream.StreamConfig) string {
			// An expiring bucket's entries must outlive the messages: a
			// shorter max age lets a second verifier store a claimed
			// episode again (ADR 27).
			shortLived := have.MaxAge != 0
			if b.expires {
				shortLived = have.MaxAge != 0 && have.MaxAge < o.MaxAge
			}
			if !slices.Equal(have.Subjects, []string{"$KV." + b.name + ".>"}) || shortLived || have.MaxMsgsPerSubject != 1 ||
				unlimited(have.MaxMsgs) != -1 || unlimited(have.MaxBytes) != -1 {
				return fmt.Sprintf("subjects %v, max age %s, history %d, limits %d msgs/%d bytes", have.Subjects, have.MaxAge,
					have.MaxMsgsPerSubject, have.MaxMsgs, have.MaxBytes)
			}
			return ""
		}); err != nil {
			return err
		}
	}
	for _, b := range schemas.BlobBuckets() {
		if err := verifyStream(ctx, c.js, "object store", "OBJ_"+b, func(have jetstream.StreamConfig) string {
			if !slices.Equal(have.Subjects, []string{"$O." + b + ".C.>", "$O." + b + ".M.>"}) ||
				unlimited(have.MaxMsgs) != -1 || unlimited(have.MaxBytes) != -1 || (have.MaxAge != 0 && have.MaxAge < o.MaxAge) {
				return fmt.Sprintf("subjects %v, max age %s, limits %d msgs/%d bytes", have.Subjects, have.MaxAge, have.MaxMsgs, have.MaxBytes)
			}
			return ""
		}); err != nil {
			return err
		}
	}
	return nil
}

// verifyStream looks stream up and reports it missing, redirected (sources,
// mirror, transforms, republish), sealed, or what check finds wrong.
func verifyStream(ctx context.Context, js jetstream.JetStream, kind, stream string, check func(jetstream.StreamConfig) string) error {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%s %s does not exist: %w", kind, stream, ErrNotProvisioned)
	}
	if err != nil {
		return fmt.Errorf("verify %s %s: %w", kind, stream, err)
	}
	have := s.CachedInfo().Config
	why := check(have)
	switch {
	case len(have.Sources) > 0 || have.Mirror != nil:
		why = "it has sources or a mirror (messages of other streams land in it)"
	case have.SubjectTransform != nil:
		why = "it has a subject transform"
	case have.RePublish != nil:
		why = "it republishes its messages"
	case have.Sealed:
		why = "it is sealed"
	case have.Retention != jetstream.LimitsPolicy:
		why = "its retention is not limits"
	}
	if why != "" {
		return fmt.Errorf("%s %s is not as provisioned: %s: %w", kind, stream, why, ErrNotProvisioned)
	}
	return nil
}

// verifyConsumer checks, creating nothing, that the durable consumer of o
// exists with o's filter, explicit acks and delivery from the first
// message, and returns it.
func verifyConsumer(ctx context.Context, c *Conn, o ConsumerOptions) (jetstream.Consumer, error) {
	cons, err := c.js.Consumer(ctx, o.Stream, o.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("durable consumer %s on %s does not exist: %w", o.Durable, o.Stream, ErrNotProvisioned)
	}
	if err != nil {
		return nil, fmt.Errorf("verify consumer %s on %s: %w", o.Durable, o.Stream, err)
	}
	have := cons.CachedInfo().Config
	filters := have.FilterSubjects
	if have.FilterSubject != "" {
		filters = append(filters, have.FilterSubject)
	}
	if !slices.Equal(filters, []string{o.Subject.Wildcard()}) || have.AckPolicy != jetstream.AckExplicitPolicy ||
		have.DeliverPolicy != jetstream.DeliverAllPolicy || have.DeliverSubject != "" || have.PauseUntil != nil && have.PauseUntil.After(time.Now()) {
		return nil, fmt.Errorf("durable consumer %s on %s is not as provisioned (filter %v, ack %s, deliver %s, paused until %v): %w",
			o.Durable, o.Stream, filters, have.AckPolicy, have.DeliverPolicy, have.PauseUntil, ErrNotProvisioned)
	}
	// A durable whose every message must be handled (scores, results) with
	// bounded deliveries would drop what runs out of them.
	if o.MaxDeliver < 0 && have.MaxDeliver >= 0 {
		return nil, fmt.Errorf("durable consumer %s on %s is not as provisioned (at most %d deliveries; want unbounded): %w",
			o.Durable, o.Stream, have.MaxDeliver, ErrNotProvisioned)
	}
	return cons, nil
}

// Verify checks, creating nothing, what Provision creates: VerifyStreams,
// then every durable consumer of Durables.
func Verify(ctx context.Context, c *Conn, o StreamOptions) error {
	if err := VerifyStreams(ctx, c, o); err != nil {
		return err
	}
	for _, d := range Durables {
		if _, err := verifyConsumer(ctx, c, d.ConsumerOptions); err != nil {
			return err
		}
	}
	return nil
}
