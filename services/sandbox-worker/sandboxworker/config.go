package sandboxworker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
)

// RegisterFlags adds the sandbox-worker's flags (environment fallbacks:
// MEDGYM_AGENT_TREE, MEDGYM_REQUIRE_CGROUPS=1).
func (c *Config) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	host, _ := os.Hostname()
	sb := &c.Sandbox
	fs.StringVar(&sb.DataRoot, "agent-tree", bus.EnvOr(getenv, "MEDGYM_AGENT_TREE", "build/library/agent"), "the task library's agent tree (<library>/agent) or an upstream folder's staged agent view; task resources are mounted read-only from here, and a directory holding task files is refused (env MEDGYM_AGENT_TREE)")
	fs.StringVar(&sb.Backend, "backend", "bwrap", "sandbox backend: bwrap or docker")
	fs.StringVar(&sb.DockerImage, "docker-image", "medgym/sandbox:latest", "image of the docker backend (built by make sandbox-image)")
	fs.IntVar(&sb.DockerReady, "docker-ready", 2, "containers the docker backend keeps started and ready for new episodes (0: each episode starts its own)")
	fs.StringVar(&sb.WorkRoot, "work-root", "", "directory for per-episode workspaces (default: a temp dir)")
	fs.IntVar(&sb.Warm, "warm", 0, "warm Python interpreters (0 = cold runs)")
	fs.BoolFunc("seccomp", "seccomp syscall filter in the bwrap sandbox (default true; =false turns it off)", func(v string) error {
		on, err := strconv.ParseBool(v)
		sb.DisableSeccomp = !on
		return err
	})
	fs.BoolVar(&sb.RequireCgroups, "require-cgroups", getenv("MEDGYM_REQUIRE_CGROUPS") == "1", "bwrap backend: refuse to start without per-run cgroups (v1, or v2 with memory, pids and cpu delegated) instead of falling back to rlimits (env MEDGYM_REQUIRE_CGROUPS=1)")
	sb.Limits.MemoryBytes, sb.Limits.DiskBytes = 2048<<20, 1024<<20
	fs.Var((*megabytes)(&sb.Limits.MemoryBytes), "memory-mb", "memory limit of one run")
	fs.Var((*megabytes)(&sb.Limits.DiskBytes), "disk-mb", "workspace disk quota of one episode; a run that grows it past this is killed (-1: none)")
	sb.Limits.DiskInodes = sandbox.DefaultLimits().DiskInodes
	fs.Int64Var(&sb.Limits.DiskInodes, "disk-inodes", sb.Limits.DiskInodes, "files, directories and links in one episode's workspace (the project quota's inode limit; else a run that grows their number past this is killed)")
	fs.IntVar(&c.Concurrency, "concurrency", 2, "actions at once")
	fs.StringVar(&c.Worker, "name", host+"/sandbox-worker", "worker name recorded in observations")
	fs.DurationVar(&c.AckWait, "ack-wait", 60*time.Second, "how long a message may go unacked (in-progress acks keep long work alive) before another process gets it")
}

// Validate rejects values the worker would misread.
func (c Config) Validate() error {
	sb := c.Sandbox
	switch {
	case c.Concurrency < 0:
		return fmt.Errorf("--concurrency %d: must be ≥ 1 (0: the default)", c.Concurrency)
	case sb.Warm < 0:
		return fmt.Errorf("--warm %d: must be ≥ 0", sb.Warm)
	case sb.DockerReady < 0:
		return fmt.Errorf("--docker-ready %d: must be ≥ 0", sb.DockerReady)
	case sb.Limits.MemoryBytes < 0:
		return fmt.Errorf("--memory-mb: must be ≥ 1")
	case sb.Limits.DiskBytes < -1:
		return fmt.Errorf("--disk-mb: must be ≥ 0 (-1: none)")
	case sb.Limits.DiskInodes < 0:
		return fmt.Errorf("--disk-inodes %d: must be ≥ 1 (0: the default)", sb.Limits.DiskInodes)
	case c.AckWait < 0:
		return errors.New("--ack-wait must be positive")
	}
	return nil
}

// LogValue is the configuration logged at start.
func (c Config) LogValue() slog.Value {
	sb := c.Sandbox
	return slog.GroupValue(slog.String("agent_tree", sb.DataRoot), slog.String("backend", sb.Backend), slog.Int("warm", sb.Warm),
		slog.Int("docker_ready", sb.DockerReady), slog.Bool("seccomp", !sb.DisableSeccomp), slog.Bool("require_cgroups", sb.RequireCgroups),
		slog.Int("concurrency", c.Concurrency))
}

// megabytes is a byte count set in MiB; -1 (none) stays -1.
type megabytes int64

func (m *megabytes) String() string {
	if m == nil || *m < 0 {
		return "-1"
	}
	return strconv.FormatInt(int64(*m)>>20, 10)
}

func (m *megabytes) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("not an integer: %q", v)
	}
	if n < 0 {
		*m = -1
		return nil
	}
	*m = megabytes(n << 20)
	return nil
}

// Serve runs the sandbox-worker with this configuration, measured by metrics.
func (c Config) Serve(ctx context.Context, conn *bus.Conn, metrics *bus.Metrics, log *slog.Logger) error {
	c.Metrics = metrics
	return Run(ctx, conn, c, log)
}
