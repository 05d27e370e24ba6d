package env

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/internal/catalog"
)

// Config of the environment server. RegisterFlags fills it for its main
// and for `medgym env serve`; tests build it literally. Zero values take
// the defaults.
type Config struct {
	// Addr is the HTTP listen address: loopback unless told otherwise
	// (a non-loopback address needs a Token).
	Addr string
	// Views is the task views directory (catalog: <dataset>/<split>.views.jsonl).
	Views string
	// Token, when set, is the bearer token of every /v1 request (from
	// MEDGYM_ENV_TOKEN or the file MEDGYM_ENV_TOKEN_FILE names; never a flag).
	Token string
	// NoToken lets a non-loopback Addr serve without a Token: anyone who
	// reaches it may open sessions (a public hub deployment, whose
	// clients send none). It is refused together with a Token.
	NoToken bool
	// OpenEnvRoot also serves the OpenEnv door at the root (/ws, /reset,
	// /health, ...), where OpenEnv's hub and validator look for it.
	OpenEnvRoot bool
	// MaxSessions caps the live sessions (429 with Retry-After beyond).
	MaxSessions int
	// Idle: a live session untouched this long is reaped as abandoned.
	Idle time.Duration
	// KeepDone: a done session is deleted after this long unused.
	KeepDone time.Duration
	// ReapEvery is how often idle sessions are looked for.
	ReapEvery time.Duration
	// StepWait bounds one step request's wait for its execution (504 after).
	StepWait time.Duration
	// MaxBody bounds a request body.
	MaxBody int64
	// MaxConns caps the open HTTP connections (more wait to be accepted),
	// at most half the process's file descriptor limit.
	MaxConns int
	// ReadTimeout bounds reading one request, headers and body; a step or
	// close then waits up to StepWait for its answer.
	ReadTimeout time.Duration
	// Run is the run of sessions that name none (default env-<UTC date>).
	Run string
	// Model is the model recorded for sessions that name none.
	Model string
	// EndOn is the end_on of sessions that name none ("" is medgym's:
	// answer). accepted and both make every checked code run a
	// correctness oracle; they are for clients written for that rule.
	EndOn string
	// Worker names this server in trajectories.
	Worker string
	// SystemAsUser folds the system prompt into the first user message.
	SystemAsUser bool
	// Concurrency of the check and score consumers.
	Concurrency int
	AckWait     time.Duration
	// InStore, when set, reports whether the trajectory store the
	// verifier writes to already holds a run: a run the run-status bucket
	// does not know as this server's (a fresh state folder over a shared
	// store) is then refused rather than added to. `medgym env serve` sets
	// it from --store on its embedded server.
	InStore func(ctx context.Context, runID string) (bool, error)
	// Metrics, when set, measures the handlers.
	Metrics *bus.Metrics
	// Ready, when set, is called with the address the API listens on.
	Ready func(addr string)
}

// DefaultAddr is the API's default address.
const DefaultAddr = "127.0.0.1:8420"

// Defaults of the HTTP server's bounds.
const (
	DefaultMaxConns    = 1024
	DefaultReadTimeout = 30 * time.Second
)

// RegisterFlags adds the server's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.Addr, "addr", bus.EnvOr(getenv, "MEDGYM_ENV_ADDR", DefaultAddr), "HTTP address of the API: loopback by default; another address needs a token (env MEDGYM_ENV_ADDR)")
	fs.StringVar(&c.Views, "views", bus.EnvOr(getenv, "MEDGYM_ENV_VIEWS", ""), "task views directory (<dataset>/<split>.views.jsonl, written by `medgym env views`); never the library's verifier tree (env MEDGYM_ENV_VIEWS)")
	fs.IntVar(&c.MaxSessions, "max-sessions", 1024, "most live sessions; more get 429 with Retry-After")
	fs.DurationVar(&c.Idle, "idle", 10*time.Minute, "a session with no request for this long is reaped and stored as abandoned")
	fs.DurationVar(&c.KeepDone, "keep-done", time.Hour, "a done session stays readable this long after its last use")
	fs.DurationVar(&c.ReapEvery, "reap-every", 30*time.Second, "how often idle sessions are looked for")
	fs.DurationVar(&c.StepWait, "step-wait", 10*time.Minute, "how long a step request waits for its execution before 504 (retry with the same turn)")
	fs.Int64Var(&c.MaxBody, "max-body", 1<<20, "largest request body in bytes (413 beyond)")
	fs.IntVar(&c.MaxConns, "max-conns", DefaultMaxConns, "most open HTTP connections; more wait to be accepted (at most half the open-file limit)")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", DefaultReadTimeout, "longest time to receive one request, headers and body (slower clients are cut off)")
	fs.StringVar(&c.Run, "run", "", "run id of sessions that name none (default env-<UTC date>)")
	fs.StringVar(&c.Model, "model", "external", "model name recorded for sessions that name none")
	fs.StringVar(&c.EndOn, "end-on", schemas.DefaultOptions().EndOn, "end_on of sessions that name none: answer (only the answer action ends an episode; "+
		"no code run is checked before the agent commits), accepted (upstream) or both; accepted and both make every checked code run a "+
		"correctness oracle, which a policy trained on the reward learns to exploit")
	fs.StringVar(&c.Worker, "worker", hostname("env"), "this server's name in trajectories")
	fs.BoolVar(&c.SystemAsUser, "system-as-user", false, "fold the system prompt into the first user message (as the llm-worker's flag)")
	fs.IntVar(&c.Concurrency, "concurrency", 16, "observations and scores handled at once")
	fs.DurationVar(&c.AckWait, "ack-wait", 60*time.Second, "how long a message may go unacked before another process gets it")
	fs.BoolVar(&c.NoToken, "no-token", false, "serve a non-loopback --addr without a token: anyone who reaches it may open sessions (a public hub deployment, whose OpenEnv clients send none)")
	fs.BoolVar(&c.OpenEnvRoot, "openenv-root", false, "also serve the OpenEnv door at / (/ws, /reset, /step, /state, /schema, /metadata, /health; /openapi.json becomes the door's, /v1's stays at /v1/openapi.json): where OpenEnv's hub and validator look for it")
	c.Token = tokenFromEnv(getenv)
}

func hostname(prefix string) string {
	h, err := os.Hostname()
	if err != nil {
		return prefix
	}
	return prefix + "@" + h
}

// tokenFromEnv reads MEDGYM_ENV_TOKEN or the file MEDGYM_ENV_TOKEN_FILE names.
func tokenFromEnv(getenv func(string) string) string {
	if f := getenv("MEDGYM_ENV_TOKEN_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "\x00unreadable:" + f
		}
		return strings.TrimSpace(string(b))
	}
	return getenv("MEDGYM_ENV_TOKEN")
}

// Validate rejects a configuration the server would misread.
func (c Config) Validate() error {
	if f, ok := strings.CutPrefix(c.Token, "\x00unreadable:"); ok {
		return fmt.Errorf("env: MEDGYM_ENV_TOKEN_FILE %s cannot be read", f)
	}
	if c.EndOn != "" {
		o := schemas.DefaultOptions()
		o.EndOn = c.EndOn
		if err := o.Validate(); err != nil {
			return fmt.Errorf("env: --end-on: %w", err)
		}
	}
	if c.Views == "" {
		return errors.New("env: --views is required: the task views directory (medgym env views --out DIR)")
	}
	host, _, err := net.SplitHostPort(c.addr())
	if err != nil {
		return fmt.Errorf("env: --addr %q: %w", c.Addr, err)
	}
	if c.NoToken && c.Token != "" {
		return errors.New("env: --no-token with a token set (MEDGYM_ENV_TOKEN or MEDGYM_ENV_TOKEN_FILE): choose one")
	}
	if !loopback(host) && c.Token == "" && !c.NoToken {
		return fmt.Errorf("env: --addr %s is not a loopback address: set a bearer token (MEDGYM_ENV_TOKEN or MEDGYM_ENV_TOKEN_FILE) first, or serve it open with --no-token", c.Addr)
	}
	if c.MaxSessions < 0 || c.Concurrency < 0 || c.MaxBody < 0 || c.MaxConns < 0 {
		return errors.New("env: --max-sessions, --concurrency, --max-body and --max-conns must be ≥ 1 (0: the default)")
	}
	if c.Idle < 0 || c.KeepDone < 0 || c.ReapEvery < 0 || c.StepWait < 0 || c.AckWait < 0 || c.ReadTimeout < 0 {
		return errors.New("env: durations must be positive")
	}
	if c.Run != "" && !schemas.ValidToken(c.Run) {
		return fmt.Errorf("env: --run %q: letters, digits, - and _ only", c.Run)
	}
	return nil
}

func (c Config) addr() string {
	if c.Addr == "" {
		return DefaultAddr
	}
	return c.Addr
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LogValue is what is logged at start (the token redacted).
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("addr", c.addr()), slog.String("views", c.Views), slog.Bool("token", c.Token != ""), slog.Bool("no_token", c.NoToken), slog.Bool("openenv_root", c.OpenEnvRoot),
		slog.Int("max_sessions", c.MaxSessions), slog.Int("max_conns", c.MaxConns), slog.Duration("idle", c.Idle), slog.String("run", c.Run), slog.String("model", c.Model), slog.String("end_on", c.EndOn))
}

// Serve runs the server (bus.Component).
func (c *Config) Serve(ctx context.Context, conn *bus.Conn, metrics *bus.Metrics, log *slog.Logger) error {
	cfg := *c
	cfg.Metrics = metrics
	return Run(ctx, conn, cfg, log)
}

// WriteViews writes the task views of dataset and split into a views
// directory (what `medgym env views` and `medgym env serve` do; the
// server reads nothing else about tasks).
func WriteViews(dir, dataset, split string, views []schemas.TaskView) error {
	return catalog.Write(dir, dataset, split, views)
}
