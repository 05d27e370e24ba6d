package bus

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/medgym/medgym/schemas"
)

// Component is a service's configuration as its composition root sees it:
// the same value is filled from flags by the service's main, by `medgym
// run/serve` and built literally by tests, then checked and run.
type Component interface {
	// RegisterFlags adds the component's flags to fs; getenv supplies the
	// environment fallbacks of their defaults.
	RegisterFlags(fs *flag.FlagSet, getenv func(string) string)
	// Validate rejects values the service would misread.
	Validate() error
	// LogValue is what the process logs at start; secrets redacted.
	slog.LogValuer
	// Serve runs the service on conn until ctx is done, measured by
	// metrics (the service's Run with this configuration).
	Serve(ctx context.Context, conn *Conn, metrics *Metrics, log *slog.Logger) error
}

// Node is how a service process reaches the bus: the NATS URL, its TLS
// files and the address of /metrics and /healthz. Credentials come from
// the environment only (AuthFromEnv).
type Node struct {
	URL         string
	MetricsAddr string
	TLS         TLS
	// Start holds --replicas, placement and --metrics-required.
	Start StartFlags
}

// RegisterFlags adds --nats, --metrics and the TLS flags; metricsDefault
// is the service's own loopback port (e.g. "127.0.0.1:9104").
func (n *Node) RegisterFlags(fs *flag.FlagSet, getenv func(string) string, metricsDefault string) {
	fs.StringVar(&n.URL, "nats", envOr(getenv, "MEDGYM_NATS", "nats://127.0.0.1:4222"), "NATS URL, or several seed URLs of a cluster comma-separated (env MEDGYM_NATS)")
	fs.StringVar(&n.MetricsAddr, "metrics", envOr(getenv, "MEDGYM_METRICS", metricsDefault), "address of /metrics and /healthz: loopback by default; "+
		"in a container or pod its own IP or host name (e.g. $POD_IP:"+portOf(metricsDefault)+"); port 0 picks a free port (logged); "+
		"taken: a warning (see --metrics-required); empty: off (env MEDGYM_METRICS)")
	n.TLS.RegisterFlags(fs, getenv)
	n.Start.RegisterFlags(fs, getenv)
}

// RunService is the whole of a service's main: it parses args into the
// node flags and cfg, validates cfg, connects (ensuring the streams and
// serving metrics) and serves cfg until ctx is done. name labels the
// connection and every log line.
func RunService(ctx context.Context, name, metricsDefault string, args []string, getenv func(string) string, stderr io.Writer, cfg Component) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var node Node
	node.RegisterFlags(fs, getenv, metricsDefault)
	cfg.RegisterFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", name)
	auth, err := AuthFromEnv(getenv)
	if err != nil {
		return err
	}
	log.Info("config", "nats", schemas.RedactURL(node.URL), "config", cfg)
	startOpts, err := node.Start.Options()
	if err != nil {
		return err
	}
	startOpts = append(startOpts, WithTLS(node.TLS), WithAuth(auth), WithRole(name))
	if slices.Contains(schemas.BlobWriters, name) {
		startOpts = append(startOpts, WithBlobService(name)) // its own blob store
	}
	conn, metrics, err := Start(ctx, node.URL, name, node.MetricsAddr, log, startOpts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	return cfg.Serve(ctx, conn, metrics, log)
}

// EnvOr returns getenv(k), or def when it is empty.
func EnvOr(getenv func(string) string, k, def string) string { return envOr(getenv, k, def) }

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return addr
}

// Binary is a service binary: its name (which labels its connection and
// every log line), the default of its --metrics (its own loopback port)
// and its Config. A service's main is Binary.Main; its tests run the
// binary in-process with Binary.Run.
type Binary struct {
	Name        string
	MetricsAddr string
	// Config returns a new, zero Config of the service.
	Config func() Component
}

// Run runs the binary on args, getenv and stderr (RunService).
func (b Binary) Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return RunService(ctx, b.Name, b.MetricsAddr, args, getenv, stderr, b.Config())
}

// Main is the binary's main: Main with Run.
func (b Binary) Main() { Main(b.Name, b.Run) }

// Main is a service binary's main: it calls run with the process's
// arguments, environment and stderr under a context cancelled by SIGINT
// or SIGTERM, and exits 1 after printing run's error.
func Main(name string, run func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// CommandMain is a command's main (medgym, trainer): it calls run with the
// process's arguments, stdout and stderr under a context cancelled by
// SIGINT or SIGTERM, and exits 1 after printing run's error, except for a
// -h request (flag.ErrHelp), which has printed the usage already.
func CommandMain(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, name+":", err)
		}
		os.Exit(1)
	}
}
