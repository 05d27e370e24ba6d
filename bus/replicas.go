package bus

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxReplicas is JetStream's limit on a stream's replicas.
const MaxReplicas = 5

// RegisterFlags adds --replicas, --placement-cluster and --placement-tags
// to fs, with MEDGYM_REPLICAS, MEDGYM_PLACEMENT_CLUSTER and
// MEDGYM_PLACEMENT_TAGS as defaults. Call Validate after parsing.
func (o *StreamOptions) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	v := &replicasValue{n: &o.Replicas}
	if env := getenv("MEDGYM_REPLICAS"); env != "" {
		if err := v.Set(env); err != nil {
			o.Replicas = -1
			v.envErr = fmt.Errorf("MEDGYM_REPLICAS: %w", err)
		}
	}
	o.flagErr = &v.envErr
	fs.Var(v, "replicas", "replicas of the streams, consumers and buckets this process creates if they do not exist yet: 1 on a single server, 3 on a JetStream cluster (env MEDGYM_REPLICAS; default 1)")
	fs.StringVar(&o.PlacementCluster, "placement-cluster", getenv("MEDGYM_PLACEMENT_CLUSTER"), "JetStream cluster new streams and buckets are placed on (env MEDGYM_PLACEMENT_CLUSTER; default: any)")
	tags := &tagsValue{tags: &o.PlacementTags}
	_ = tags.Set(getenv("MEDGYM_PLACEMENT_TAGS"))
	fs.Var(tags, "placement-tags", "comma-separated server_tags new streams and buckets are placed on (env MEDGYM_PLACEMENT_TAGS)")
}

// Validate reports a bad replica count (from a flag or the environment).
func (o StreamOptions) Validate() error {
	if o.flagErr != nil && *o.flagErr != nil {
		return *o.flagErr
	}
	if o.Replicas < 0 || o.Replicas > MaxReplicas {
		return fmt.Errorf("--replicas %d: must be 1 to %d", o.Replicas, MaxReplicas)
	}
	return nil
}

// placed returns the replicas and placement for stream: those it already
// has if it exists (and its config), else o's.
func (o StreamOptions) placed(ctx context.Context, js jetstream.JetStream, stream string) (int, *jetstream.Placement, *jetstream.StreamConfig) {
	if s, err := js.Stream(ctx, stream); err == nil {
		c := s.CachedInfo().Config
		return c.Replicas, c.Placement, &c
	}
	if o.PlacementCluster == "" && len(o.PlacementTags) == 0 {
		return o.Replicas, nil, nil
	}
	return o.Replicas, &jetstream.Placement{Cluster: o.PlacementCluster, Tags: o.PlacementTags}, nil
}

// sameStream says whether the stream has the settings EnsureStreams sets.
func sameStream(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.Storage == want.Storage &&
		have.MaxAge == want.MaxAge && have.Duplicates == want.Duplicates && have.Discard == want.Discard &&
		unlimited(have.MaxBytes) == unlimited(want.MaxBytes) && unlimited(have.MaxMsgs) == unlimited(want.MaxMsgs) &&
		unlimited(have.MaxMsgsPerSubject) == unlimited(want.MaxMsgsPerSubject) && unlimited(int64(have.MaxMsgSize)) == unlimited(int64(want.MaxMsgSize))
}

// unlimited is a stream limit with every "no limit" value as -1.
func unlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

type replicasValue struct {
	n      *int
	envErr error
}

func (v *replicasValue) String() string {
	if v == nil || v.n == nil || *v.n == 0 {
		return "1" // StreamOptions' default
	}
	return strconv.Itoa(*v.n)
}

func (v *replicasValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > MaxReplicas {
		return fmt.Errorf("replicas %q: want a number from 1 to %d (3 on a 3-node cluster)", s, MaxReplicas)
	}
	*v.n = n
	v.envErr = nil
	return nil
}

type tagsValue struct{ tags *[]string }

func (v *tagsValue) String() string {
	if v == nil || v.tags == nil {
		return ""
	}
	return strings.Join(*v.tags, ",")
}

func (v *tagsValue) Set(s string) error {
	*v.tags = nil
	for t := range strings.SplitSeq(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			*v.tags = append(*v.tags, t)
		}
	}
	return nil
}

// StartFlags are the flags every service passes to Start besides TLS:
// --replicas and placement (StreamOptions.RegisterFlags),
// --metrics-required, --connect-timeout and --provision.
type StartFlags struct {
	Streams         StreamOptions
	MetricsRequired bool
	// ConnectTimeout bounds the wait for a NATS server not reachable at
	// start (0: wait until stopped), see WithConnectTimeout.
	ConnectTimeout time.Duration
	// Provision: create or only verify the streams and durable consumers
	// (--provision, see ProvisionMode).
	Provision ProvisionMode

	timeoutErr, provisionErr error
}

// RegisterFlags adds the flags to fs, with environment defaults.
func (f *StartFlags) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	f.Streams.RegisterFlags(fs, getenv)
	required, _ := strconv.ParseBool(getenv("MEDGYM_METRICS_REQUIRED"))
	fs.BoolVar(&f.MetricsRequired, "metrics-required", required, "exit when --metrics cannot be bound, instead of warning and running without metrics (env MEDGYM_METRICS_REQUIRED)")
	RegisterConnectTimeout(fs, getenv, &f.ConnectTimeout, &f.timeoutErr)
	RegisterProvisionFlag(fs, getenv, &f.Provision, &f.provisionErr)
}

// RegisterConnectTimeout adds --connect-timeout to fs, setting *d: its
// default is MEDGYM_CONNECT_TIMEOUT, else 0 (wait until stopped). A bad
// environment value is left in *envErr unless the flag is given.
func RegisterConnectTimeout(fs *flag.FlagSet, getenv func(string) string, d *time.Duration, envErr *error) {
	*d, *envErr = ConnectTimeoutEnv(getenv, 0)
	fs.Var(&timeoutValue{d: d, envErr: envErr}, "connect-timeout", ConnectTimeoutUsage+"; 0: wait until stopped (env MEDGYM_CONNECT_TIMEOUT; default 0)")
}

type timeoutValue struct {
	d      *time.Duration
	envErr *error
}

func (v *timeoutValue) String() string {
	if v == nil || v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v *timeoutValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration ≥ 0 such as 2m (0: wait until stopped)")
	}
	*v.d, *v.envErr = d, nil
	return nil
}

// ConnectTimeoutUsage describes --connect-timeout; callers add the default.
const ConnectTimeoutUsage = "how long to wait at start for a NATS server that is not reachable yet (retrying with backoff, /healthz 503 meanwhile) before giving up"

// ConnectTimeoutEnv is MEDGYM_CONNECT_TIMEOUT as a duration, def when it
// is unset, and an error when it is not a duration ≥ 0.
func ConnectTimeoutEnv(getenv func(string) string, def time.Duration) (time.Duration, error) {
	v := getenv("MEDGYM_CONNECT_TIMEOUT")
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return def, fmt.Errorf("MEDGYM_CONNECT_TIMEOUT %q: want a duration ≥ 0 such as 2m (0: wait until stopped)", v)
	}
	return d, nil
}

// Options validates the flags and returns them as Start options.
func (f StartFlags) Options() ([]ConnectOption, error) {
	if err := f.Streams.Validate(); err != nil {
		return nil, err
	}
	if f.timeoutErr != nil {
		return nil, f.timeoutErr
	}
	if f.provisionErr != nil {
		return nil, f.provisionErr
	}
	if f.ConnectTimeout < 0 {
		return nil, fmt.Errorf("--connect-timeout %s: must be ≥ 0 (0: wait until stopped)", f.ConnectTimeout)
	}
	return []ConnectOption{WithStreams(f.Streams), WithMetricsRequired(f.MetricsRequired), WithConnectTimeout(f.ConnectTimeout),
		WithProvision(f.Provision)}, nil
}
