// Command sandbox-worker executes agent actions in isolated sandboxes
// (bubblewrap by default, Docker optionally). See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	natsURL := fs.String("nats", envOr(getenv, "MEDGYM_NATS", "nats://127.0.0.1:4222"), "NATS URL, or several seed URLs of a cluster comma-separated (env MEDGYM_NATS)")
	data := fs.String("agent-tree", envOr(getenv, "MEDGYM_AGENT_TREE", "build/library/agent"), "the task library's agent tree (<library>/agent) or an upstream folder's staged agent view; task resources are mounted read-only from here, and a directory holding task files is refused (env MEDGYM_AGENT_TREE)")
	backend := fs.String("backend", "bwrap", "sandbox backend: bwrap or docker")
	image := fs.String("docker-image", "medgym/sandbox:latest", "image of the docker backend (built by make sandbox-image)")
	dockerReady := fs.Int("docker-ready", 2, "containers the docker backend keeps started and ready for new episodes (0: each episode starts its own)")
	workRoot := fs.String("work-root", "", "directory for per-episode workspaces (default: a temp dir)")
	warm := fs.Int("warm", 0, "warm Python interpreters (0 = cold runs)")
	seccomp := fs.Bool("seccomp", true, "seccomp syscall filter in the bwrap sandbox (--seccomp=false turns it off)")
	requireCg := fs.Bool("require-cgroups", getenv("MEDGYM_REQUIRE_CGROUPS") == "1", "bwrap backend: refuse to start without per-run cgroups (v1, or v2 with memory, pids and cpu delegated) instead of falling back to rlimits (env MEDGYM_REQUIRE_CGROUPS=1)")
	conc := fs.Int("concurrency", 2, "actions at once")
	memMB := fs.Int("memory-mb", 2048, "memory limit of one run")
	diskMB := fs.Int64("disk-mb", 1024, "workspace disk quota of one episode; a run that grows it past this is killed (-1: none)")
	name := fs.String("name", host+"/sandbox-worker", "worker name recorded in observations")
	metricsAddr := fs.String("metrics", envOr(getenv, "MEDGYM_METRICS", "127.0.0.1:9103"), "address of /metrics and /healthz: loopback by default; in a container or pod its own IP or host name (e.g. $POD_IP:9103); port 0 picks a free port (logged); taken: a warning (see --metrics-required); empty: off (env MEDGYM_METRICS)")
	var natsTLS bus.TLS
	natsTLS.RegisterFlags(fs, getenv)
	var start bus.StartFlags
	start.RegisterFlags(fs, getenv)
	ackWait := fs.Duration("ack-wait", 60*time.Second, "how long a message may go unacked (in-progress acks keep long work alive) before another process gets it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "sandbox-worker")
	log.Info("config", "nats", schemas.RedactURL(*natsURL), "agent-tree", *data, "backend", *backend, "warm", *warm, "docker-ready", *dockerReady,
		"seccomp", *seccomp, "require-cgroups", *requireCg, "concurrency", *conc)
	auth, err := bus.AuthFromEnv(getenv)
	if err != nil {
		return err
	}
	startOpts, err := start.Options()
	if err != nil {
		return err
	}
	conn, metrics, err := bus.Start(ctx, *natsURL, "sandbox-worker", *metricsAddr, log, append(startOpts, bus.WithTLS(natsTLS), bus.WithAuth(auth))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	return service.Run(ctx, conn, service.Config{Metrics: metrics, AckWait: *ackWait,
		Sandbox: service.SandboxConfig{Backend: *backend, DockerImage: *image, DockerReady: *dockerReady,
			DataRoot: *data, WorkRoot: *workRoot, Warm: *warm, DisableSeccomp: !*seccomp, RequireCgroups: *requireCg,
			Limits: service.Limits{MemoryBytes: int64(*memMB) << 20, DiskBytes: diskBytes(*diskMB)}},
		Concurrency: *conc, Worker: *name,
	}, log)
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

// diskBytes converts --disk-mb; a negative value turns the quota off.
func diskBytes(mb int64) int64 {
	if mb < 0 {
		return -1
	}
	return mb << 20
}
