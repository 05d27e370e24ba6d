package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/dispatcher/dispatcher"
	"github.com/medgym/medgym/services/llm-worker/llmworker"
	"github.com/medgym/medgym/services/sandbox-worker/sandboxworker"
	"github.com/medgym/medgym/services/verifier/verifier"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// ServiceFlags are the flags shared by run and serve for in-process
// services. Each service's options are its own Config's flags (the ones
// its binary takes), registered here under the names in componentFlags;
// the data root, task library, upstream folder, store and episode limit
// are the CLI's and are handed to every service that reads them.
type ServiceFlags struct {
	Data, TasksDir string
	Library        string
	Store          string
	LogLevel       string
	MetricsAddr    string
	NATSTLS        bus.TLS
	Streams        bus.StreamOptions
	// Provision: create the streams and durable consumers, or only verify
	// them (--provision; bus.ProvisionMode).
	Provision    bus.ProvisionMode
	provisionErr error
	MaxEpisodes  int

	Dispatcher dispatcher.Config
	LLM        llmworker.Config
	Sandbox    sandboxworker.Config
	Verifier   verifier.Config

	// metrics, when set, is what StartServices measures the services with
	// (RunSpec reads the model endpoint's state from it).
	metrics *bus.Metrics
}

// componentFlag says how a service's flag is named on the CLI: under
// prefix-name, except the names kept as they are and those the CLI sets
// itself (skipped).
type componentFlag struct {
	prefix string
	keep   []string
	skip   []string
}

var componentFlags = map[string]componentFlag{
	"dispatcher": {prefix: "dispatcher", skip: []string{"data", "library", "max-episodes"}},
	"llm-worker": {prefix: "llm", skip: []string{"data", "library", "tasks-dir", "llm-url"},
		keep: []string{"llm-ca", "llm-timeout", "llm-retries", "llm-max-concurrent", "no-temperature", "max-completion-tokens",
			"debugger-url", "debugger-model", "debugger-api-key-env", "system-as-user"}},
	"sandbox-worker": {prefix: "sandbox", skip: []string{"agent-tree"}, keep: []string{"warm", "docker-ready", "require-cgroups"}},
	"verifier": {prefix: "verifier", skip: []string{"data", "library", "tasks-dir", "store"},
		keep: []string{"s3-endpoint", "s3-region", "s3-insecure", "format-reward", "wrong-answer-penalty", "graded-ml", "store-give-up"}},
}

// registerComponent adds c's flags to fs, named as componentFlags says.
func registerComponent(fs *flag.FlagSet, name string, c bus.Component) {
	own := flag.NewFlagSet(name, flag.ContinueOnError)
	c.RegisterFlags(own, os.Getenv)
	cf := componentFlags[name]
	own.VisitAll(func(fl *flag.Flag) {
		switch {
		case slices.Contains(cf.skip, fl.Name):
		case slices.Contains(cf.keep, fl.Name):
			fs.Var(fl.Value, fl.Name, fl.Usage)
		default:
			fs.Var(fl.Value, cf.prefix+"-"+fl.Name, name+": "+fl.Usage)
		}
	})
}

// Register defines the services' flags on fs.
func (f *ServiceFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Data, "data", tasks.DataRoot(), "shared data root (task sources); env MEDGYM_DATA")
	fs.StringVar(&f.Library, "library", tasks.LibraryDir(), "generated task library (databases, task files); built by `make library`")
	fs.StringVar(&f.TasksDir, "tasks-dir", "", "upstream MedAgentGym task folder (instead of the built-in library)")
	fs.StringVar(&f.Store, "store", "runs", "trajectory store: a directory or s3://bucket/prefix")
	fs.StringVar(&f.LogLevel, "log", "warn", "log level: debug, info, warn, error")
	fs.StringVar(&f.MetricsAddr, "metrics", "", "serve Prometheus /metrics and /healthz of the in-process services on this address (e.g. 127.0.0.1:9100)")
	fs.IntVar(&f.MaxEpisodes, "max-episodes", 1_000_000, "most episodes (tasks × samples) of one run; larger runs are refused (checked here and by the dispatcher)")
	f.NATSTLS.RegisterFlags(fs, os.Getenv)
	registerComponent(fs, "dispatcher", &f.Dispatcher)
	registerComponent(fs, "llm-worker", &f.LLM)
	registerComponent(fs, "sandbox-worker", &f.Sandbox)
	registerComponent(fs, "verifier", &f.Verifier)
	f.Streams.RegisterFlags(fs, os.Getenv)
	bus.RegisterProvisionFlag(fs, os.Getenv, &f.Provision, &f.provisionErr)
}

// Configs returns the services' configurations with the CLI's shared
// settings filled in; llmURL is the llm-worker's default endpoint.
func (f *ServiceFlags) Configs(llmURL string) (dispatcher.Config, llmworker.Config, sandboxworker.Config, verifier.Config) {
	d, l, s, v := f.Dispatcher, f.LLM, f.Sandbox, f.Verifier
	d.DataRoot, d.LibraryDir, d.MaxEpisodes = f.Data, f.Library, f.MaxEpisodes
	l.DataRoot, l.TasksDir, l.LibraryDir, l.LLM.DefaultBaseURL = f.Data, f.TasksDir, f.Library, llmURL
	v.DataRoot, v.TasksDir, v.LibraryDir, v.Store = f.Data, f.TasksDir, f.Library, f.Store
	return d, l, s, v
}

// Validate rejects values the services would misread, as each service
// does (zero concurrency would mean a default here, so it is refused).
func (f *ServiceFlags) Validate() error {
	d, l, s, v := f.Configs("")
	for _, c := range []bus.Component{&d, &l, &s, &v} {
		if err := c.Validate(); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"llm-concurrency", l.Concurrency}, {"sandbox-concurrency", s.Concurrency}, {"verifier-concurrency", v.Concurrency}} {
		if c.v < 1 {
			return fmt.Errorf("--%s %d: must be ≥ 1", c.name, c.v)
		}
	}
	if l.LLM.Timeout <= 0 {
		return fmt.Errorf("--llm-timeout %s: must be positive", l.LLM.Timeout)
	}
	if s.Sandbox.Limits.MemoryBytes < 1 {
		return errors.New("--sandbox-memory-mb: must be ≥ 1")
	}
	if err := f.Streams.Validate(); err != nil {
		return err
	}
	return f.provisionErr
}

// StoreOptions are the S3 settings of --store (the verifier's).
func (f *ServiceFlags) StoreOptions() store.Options { return f.Verifier.StoreOptions }

// AgentTree is the directory the in-process sandbox-worker mounts task data
// from: the library's agent tree, or with --tasks-dir the agent view of the
// upstream folder staged in a temporary directory (its task files left
// out), removed by cleanup. Never the library root or a folder with task
// files: the sandbox refuses those.
func (f *ServiceFlags) AgentTree() (dir string, cleanup func(), err error) {
	if f.TasksDir == "" {
		dir = tasks.AgentTree(f.Library)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("task library agent tree: %w", err)
		}
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "medgym-upstream-agent-")
	if err != nil {
		return "", nil, fmt.Errorf("agent view of %s: %w", f.TasksDir, err)
	}
	cleanup = func() { _ = os.RemoveAll(tmp) }
	dir = filepath.Join(tmp, "view")
	if _, err := tasks.StageUpstream(f.TasksDir, dir); err != nil {
		cleanup()
		return "", nil, err
	}
	// The sandbox user must reach the view (MkdirTemp makes it 0700).
	if err := os.Chmod(tmp, 0o755); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("agent view of %s: %w", f.TasksDir, err)
	}
	return dir, cleanup, nil
}

// StartServices runs every service in-process on conn until ctx is done.
func StartServices(ctx context.Context, conn *bus.Conn, f *ServiceFlags, llmURL string, log *slog.Logger) (wait func() error) {
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
	metrics := f.metrics
	if metrics == nil {
		metrics = bus.NewMetrics()
	}
	if err := metrics.Serve(ctx, f.MetricsAddr, conn, log); err != nil {
		return func() error { return err }
	}
	dc, lc, sc, vc := f.Configs(llmURL)
	dc.Metrics, lc.Metrics, sc.Metrics, vc.Metrics = metrics, metrics, metrics, metrics
	goService("dispatcher", func() error { return dispatcher.Run(ctx, conn, dc, log.With("service", "dispatcher")) })
	goService("llm-worker", func() error { return llmworker.Run(ctx, conn, lc, log.With("service", "llm-worker")) })
	goService("sandbox-worker", func() error {
		agent, cleanup, err := f.AgentTree()
		if err != nil {
			return err
		}
		defer cleanup()
		sc.Sandbox.DataRoot = agent
		return sandboxworker.Run(ctx, conn, sc, log.With("service", "sandbox-worker"))
	})
	goService("verifier", func() error { return verifier.Run(ctx, conn, vc, log.With("service", "verifier")) })
	return func() error {
		if err := g.Wait(); err != nil && parent.Err() == nil {
			return fmt.Errorf("services: %w", err)
		}
		return nil
	}
}
