// Command dispatcher takes run specs and emits episode requests with
// admission control. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/dispatcher/internal/dispatch"
	"github.com/medgym/medgym/services/dispatcher/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", envOr(getenv, "MEDGYM_NATS", "nats://127.0.0.1:4222"), "NATS URL, or several seed URLs of a cluster comma-separated (env MEDGYM_NATS)")
	data := fs.String("data", envOr(getenv, "MEDGYM_DATA", "../shared/data"), "shared data root (env MEDGYM_DATA)")
	library := fs.String("library", envOr(getenv, "MEDGYM_LIBRARY", "build/library"), "generated task library (env MEDGYM_LIBRARY)")
	metricsAddr := fs.String("metrics", envOr(getenv, "MEDGYM_METRICS", "127.0.0.1:9101"), "address of /metrics and /healthz: loopback by default; in a container or pod its own IP or host name (e.g. $POD_IP:9101); port 0 picks a free port (logged); taken: a warning (see --metrics-required); empty: off (env MEDGYM_METRICS)")
	var natsTLS bus.TLS
	natsTLS.RegisterFlags(fs, getenv)
	var start bus.StartFlags
	start.RegisterFlags(fs, getenv)
	defMax := dispatch.DefaultMaxEpisodes
	if v := getenv("MEDGYM_MAX_EPISODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("MEDGYM_MAX_EPISODES: %q is not an integer", v)
		}
		defMax = n
	}
	maxEpisodes := fs.Int("max-episodes", defMax, "most episodes (tasks × samples) of one run; larger runs are refused (env MEDGYM_MAX_EPISODES)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *maxEpisodes < 1 {
		return fmt.Errorf("--max-episodes must be ≥ 1, got %d", *maxEpisodes)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "dispatcher")
	log.Info("config", "nats", schemas.RedactURL(*natsURL), "data", *data, "max_episodes", *maxEpisodes)
	auth, err := bus.AuthFromEnv(getenv)
	if err != nil {
		return err
	}
	startOpts, err := start.Options()
	if err != nil {
		return err
	}
	conn, metrics, err := bus.Start(ctx, *natsURL, "dispatcher", *metricsAddr, log, append(startOpts, bus.WithTLS(natsTLS), bus.WithAuth(auth))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	return service.Run(ctx, conn, service.Config{Metrics: metrics, DataRoot: *data, LibraryDir: *library, MaxEpisodes: *maxEpisodes}, log)
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}
