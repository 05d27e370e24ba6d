package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/medgym/medgym/bus"
	dispatcher "github.com/medgym/medgym/services/dispatcher/service"
	llmworker "github.com/medgym/medgym/services/llm-worker/service"
	sandboxworker "github.com/medgym/medgym/services/sandbox-worker/service"
	verifier "github.com/medgym/medgym/services/verifier/service"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// serviceFlags are the flags shared by run and serve for in-process services.
type serviceFlags struct {
	data, tasksDir      string
	library             string
	store               string
	s3Endpoint          string
	s3Region            string
	s3Insecure          bool
	backend             string
	warm                int
	dockerReady         int
	sandboxConcurrency  int
	llmConcurrency      int
	verifierConcurrency int
	wrongAnswerPenalty  float64
	llmTimeout          time.Duration
	llmRetries          int
	llmCA               string
	llmNoTemperature    bool
	llmMaxCompletion    bool
	debuggerURL         string
	debuggerModel       string
	debuggerKeyEnv      string
	memoryMB            int
	requireCgroups      bool
	diskMB              int
	logLevel            string
	metricsAddr         string
	natsTLS             bus.TLS
	streams             bus.StreamOptions
	maxEpisodes         int
	storeGiveUp         time.Duration
}

func (f *serviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.data, "data", defaultDataRoot(), "shared data root (task sources); env MEDGYM_DATA")
	fs.StringVar(&f.library, "library", defaultLibraryDir(), "generated task library (databases, task files); built by `make library`")
	fs.StringVar(&f.tasksDir, "tasks-dir", "", "upstream MedAgentGym task folder (instead of the built-in library)")
	fs.StringVar(&f.store, "store", "runs", "trajectory store: a directory or s3://bucket/prefix")
	fs.StringVar(&f.s3Endpoint, "s3-endpoint", "", "S3 endpoint host:port (default $AWS_ENDPOINT_URL); credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
	fs.StringVar(&f.s3Region, "s3-region", "", "S3 region (default $AWS_REGION)")
	fs.BoolVar(&f.s3Insecure, "s3-insecure", false, "use plain HTTP for the S3 endpoint")
	fs.StringVar(&f.backend, "sandbox-backend", "bwrap", "sandbox backend: bwrap or docker")
	fs.IntVar(&f.warm, "warm", 0, "warm Python interpreters per sandbox worker (0 = cold runs)")
	fs.IntVar(&f.dockerReady, "docker-ready", 2, "containers the docker sandbox backend keeps ready for new episodes (0: each episode starts its own)")
	fs.BoolVar(&f.requireCgroups, "require-cgroups", false, "bwrap sandbox: refuse to start without per-run cgroups instead of falling back to rlimits")
	fs.IntVar(&f.sandboxConcurrency, "sandbox-concurrency", 2, "actions run at once by the sandbox worker")
	fs.IntVar(&f.llmConcurrency, "llm-concurrency", 32, "episode steps run at once by the llm-worker")
	fs.IntVar(&f.verifierConcurrency, "verifier-concurrency", 32, "episodes scored and stored at once (also the rows per Parquet file)")
	fs.Float64Var(&f.wrongAnswerPenalty, "wrong-answer-penalty", 0, "reward −c for a wrong answer or no answer on tasks that offer abstention (EHRSQL 2024's c; mean reward = RS(c)); 0 = off")
	fs.DurationVar(&f.llmTimeout, "llm-timeout", 5*time.Minute, "timeout of one model request")
	fs.IntVar(&f.llmRetries, "llm-retries", 4, "retries of a failing model request (429, 5xx, timeouts); 0: none")
	fs.StringVar(&f.llmCA, "llm-ca", os.Getenv("MEDGYM_LLM_CA"), "PEM file of a private CA trusted for https:// model endpoints, besides the system's (env MEDGYM_LLM_CA)")
	fs.BoolVar(&f.llmNoTemperature, "no-temperature", false, "omit temperature/top_p (models that refuse them, e.g. OpenAI o-series)")
	fs.BoolVar(&f.llmMaxCompletion, "max-completion-tokens", false, "send max_completion_tokens instead of max_tokens (reasoning models)")
	fs.StringVar(&f.debuggerURL, "debugger-url", "", "base URL of the model answering the debug action (default: the episode's endpoint)")
	fs.StringVar(&f.debuggerModel, "debugger-model", "", "model answering the debug action (default: the episode's model)")
	fs.StringVar(&f.debuggerKeyEnv, "debugger-api-key-env", "", "environment variable holding the debugger's API key (default: the episode's)")
	fs.IntVar(&f.memoryMB, "sandbox-memory-mb", 2048, "memory limit of one sandboxed run")
	fs.IntVar(&f.diskMB, "sandbox-disk-mb", 1024, "workspace disk quota of one episode (-1: none)")
	fs.StringVar(&f.logLevel, "log", "warn", "log level: debug, info, warn, error")
	fs.StringVar(&f.metricsAddr, "metrics", "", "serve Prometheus /metrics and /healthz of the in-process services on this address (e.g. 127.0.0.1:9100)")
	fs.DurationVar(&f.storeGiveUp, "store-give-up", verifier.DefaultStoreGiveUp, "how long the store may refuse every row of a run before the verifier fails the run with its error")
	fs.IntVar(&f.maxEpisodes, "max-episodes", 1_000_000, "most episodes (tasks × samples) of one run; larger runs are refused (checked here and by the dispatcher)")
	f.natsTLS.RegisterFlags(fs, os.Getenv)
	f.streams.RegisterFlags(fs, os.Getenv)
}

// validate rejects values the services would misread: a negative retry
// count used to fall back to a default, zero concurrency to hang.
func (f *serviceFlags) validate() error {
	for _, c := range []struct {
		name string
		v    int
		min  int
	}{
		{"llm-retries", f.llmRetries, 0},
		{"sandbox-concurrency", f.sandboxConcurrency, 1},
		{"llm-concurrency", f.llmConcurrency, 1},
		{"verifier-concurrency", f.verifierConcurrency, 1},
		{"warm", f.warm, 0},
		{"docker-ready", f.dockerReady, 0},
		{"sandbox-memory-mb", f.memoryMB, 1},
		{"sandbox-disk-mb", f.diskMB, -1},
	} {
		if c.v < c.min {
			return fmt.Errorf("--%s %d: must be ≥ %d", c.name, c.v, c.min)
		}
	}
	if err := f.streams.Validate(); err != nil {
		return err
	}
	if f.llmTimeout <= 0 {
		return fmt.Errorf("--llm-timeout %s: must be positive", f.llmTimeout)
	}
	return nil
}

func (f *serviceFlags) storeOptions() store.Options {
	return store.Options{Endpoint: f.s3Endpoint, Region: f.s3Region, UseSSL: !f.s3Insecure}
}

// agentTree is the directory the in-process sandbox-worker mounts task data
// from: the library's agent tree, or with --tasks-dir the agent view of the
// upstream folder staged in a temporary directory (its task files left
// out), removed by cleanup. Never the library root or a folder with task
// files: the sandbox refuses those.
func (f *serviceFlags) agentTree() (dir string, cleanup func(), err error) {
	if f.tasksDir == "" {
		dir = tasks.AgentTree(f.library)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("task library agent tree: %w", err)
		}
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "medgym-upstream-agent-")
	if err != nil {
		return "", nil, fmt.Errorf("agent view of %s: %w", f.tasksDir, err)
	}
	cleanup = func() { _ = os.RemoveAll(tmp) }
	dir = filepath.Join(tmp, "view")
	if _, err := tasks.StageUpstream(f.tasksDir, dir); err != nil {
		cleanup()
		return "", nil, err
	}
	// The sandbox user must reach the view (MkdirTemp makes it 0700).
	if err := os.Chmod(tmp, 0o755); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("agent view of %s: %w", f.tasksDir, err)
	}
	return dir, cleanup, nil
}

// startServices runs every service in-process on conn until ctx is done.
func startServices(ctx context.Context, conn *bus.Conn, f *serviceFlags, llmURL string, log *slog.Logger) (wait func() error) {
	host, _ := os.Hostname()
	parent := ctx
	g, ctx := errgroup.WithContext(ctx)
	goService := func(name string, run func() error) {
		g.Go(func() error {
			err := run()
			if ctx.Err() == nil {
				if err == nil {
					err = fmt.Errorf("%s stopped unexpectedly", name)
				}
				return fmt.Errorf("%s: %w", name, err)
			}
			return err
		})
	}
	metrics := bus.NewMetrics()
	if err := metrics.Serve(ctx, f.metricsAddr, conn, log); err != nil {
		return func() error { return err }
	}
	goService("dispatcher", func() error {
		return dispatcher.Run(ctx, conn, dispatcher.Config{Metrics: metrics, DataRoot: f.data, LibraryDir: f.library, MaxEpisodes: f.maxEpisodes}, log.With("service", "dispatcher"))
	})
	goService("llm-worker", func() error {
		return llmworker.Run(ctx, conn, llmworker.Config{Metrics: metrics,
			DataRoot: f.data, TasksDir: f.tasksDir, LibraryDir: f.library, Concurrency: f.llmConcurrency, Worker: host + "/llm-worker",
			LLM: llmworker.ClientDefaults{DefaultBaseURL: llmURL, CAFile: f.llmCA, Timeout: f.llmTimeout, MaxRetries: f.llmRetries,
				NoTemperature: f.llmNoTemperature, UseMaxCompletionTokens: f.llmMaxCompletion},
			Debugger: llmworker.DebuggerConfig{BaseURL: f.debuggerURL, Model: f.debuggerModel, APIKeyEnv: f.debuggerKeyEnv},
		}, log.With("service", "llm-worker"))
	})
	goService("sandbox-worker", func() error {
		agent, cleanup, err := f.agentTree()
		if err != nil {
			return err
		}
		defer cleanup()
		lim := sandboxworker.Limits{MemoryBytes: int64(f.memoryMB) << 20, DiskBytes: int64(f.diskMB) << 20}
		if f.diskMB < 0 {
			lim.DiskBytes = -1
		}
		return sandboxworker.Run(ctx, conn, sandboxworker.Config{Metrics: metrics,
			Sandbox: sandboxworker.SandboxConfig{Backend: f.backend, DataRoot: agent, Warm: f.warm,
				DockerReady: f.dockerReady, RequireCgroups: f.requireCgroups, Limits: lim},
			Concurrency: f.sandboxConcurrency, Worker: host + "/sandbox-worker",
		}, log.With("service", "sandbox-worker"))
	})
	goService("verifier", func() error {
		return verifier.Run(ctx, conn, verifier.Config{Metrics: metrics,
			DataRoot: f.data, TasksDir: f.tasksDir, LibraryDir: f.library, Store: f.store, StoreOptions: f.storeOptions(),
			Concurrency: f.verifierConcurrency, WrongAnswerPenalty: f.wrongAnswerPenalty, StoreGiveUp: f.storeGiveUp,
		}, log.With("service", "verifier"))
	})
	return func() error {
		if err := g.Wait(); err != nil && parent.Err() == nil {
			return fmt.Errorf("services: %w", err)
		}
		return nil
	}
}
