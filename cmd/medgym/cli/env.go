package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	env "github.com/medgym/medgym/services/env/env"
	"github.com/medgym/medgym/services/sandbox-worker/sandboxworker"
	"github.com/medgym/medgym/services/verifier/verifier"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// cmdEnv is `medgym env serve|views`.
func cmdEnv(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: medgym env serve [flags] | medgym env views --out DIR [flags]")
		return flag.ErrHelp
	}
	switch args[0] {
	case "serve":
		return cmdEnvServe(ctx, args[1:], stderr)
	case "views":
		return cmdEnvViews(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("env: unknown subcommand %q (serve, views)", args[0])
}

// envSplits are the splits whose views are written (those a dataset lacks
// are skipped).
var envSplits = []string{"train", "test", "valid"}

// writeViews writes the agent-visible views of datasets (all built-in ones
// when empty) into dir, read from the library by the task loaders; only
// the views are written, never truth or references.
func writeViews(ctx context.Context, dir string, f *ServiceFlags, datasets []string, stderr io.Writer) error {
	if len(datasets) == 0 {
		datasets = tasks.Datasets()
	}
	n := 0
	for _, ds := range datasets {
		if !slices.Contains(tasks.Datasets(), ds) {
			return fmt.Errorf("env: unknown dataset %q (built-in: %v)", ds, tasks.Datasets())
		}
		for _, split := range envSplits {
			ts, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: split, DataRoot: f.Data, LibraryDir: f.Library})
			if err != nil || len(ts) == 0 {
				continue // the dataset has no such split, or is not generated
			}
			views := make([]schemas.TaskView, len(ts))
			for i, t := range ts {
				views[i] = t.View
			}
			if err := env.WriteViews(dir, ds, split, views); err != nil {
				return err
			}
			n += len(views)
		}
	}
	if n == 0 {
		return fmt.Errorf("env: no task of %v could be loaded (library %s, data %s): run make library", datasets, f.Library, f.Data)
	}
	fmt.Fprintf(stderr, "medgym env: %d task views in %s\n", n, dir)
	return nil
}

func cmdEnvViews(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("env views", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f ServiceFlags
	fs.StringVar(&f.Data, "data", tasks.DataRoot(), "shared data root (task sources); env MEDGYM_DATA")
	fs.StringVar(&f.Library, "library", tasks.LibraryDir(), "generated task library")
	out := fs.String("out", "", "views directory to write (<dataset>/<split>.views.jsonl)")
	datasets := fs.String("dataset", "", "datasets, comma separated (default: every built-in one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("env views: --out is required")
	}
	return writeViews(ctx, *out, &f, splitList(*datasets), stderr)
}

// cmdEnvServe starts the environment server on embedded defaults (an
// in-process JetStream server, sandbox-worker and verifier, as `medgym run`
// does) or against --nats, where the other services already run.
func cmdEnvServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("env serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f ServiceFlags
	f.Register(fs)
	var ec env.Config
	own := flag.NewFlagSet("env", flag.ContinueOnError)
	ec.RegisterFlags(own, os.Getenv)
	// The server's flags keep their names, except those the in-process
	// services already take (--system-as-user: the env server follows the
	// llm-worker's), which get an env- prefix.
	own.VisitAll(func(fl *flag.Flag) {
		name := fl.Name
		if fs.Lookup(name) != nil {
			name = "env-" + name
		}
		fs.Var(fl.Value, name, "env: "+fl.Usage)
	})
	// A session's final step waits for its row to be stored: the embedded
	// verifier rolls a file once episodes stop arriving for a moment
	// rather than after --verifier-batch-age (a value given on the command
	// line wins).
	if fl := fs.Lookup("verifier-batch-idle"); fl != nil {
		if err := fl.Value.Set(envBatchIdle.String()); err != nil {
			return err
		}
		fl.DefValue = envBatchIdle.String()
	}
	nats := fs.String("nats", "", "NATS URL of running services (default: embedded server, sandbox-worker and verifier in-process)")
	state := fs.String("state", ".medgym", "directory for the embedded JetStream file store and the task views")
	datasets := fs.String("dataset", "", "datasets offered, comma separated (default: every built-in one the library has)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	ec.SystemAsUser = ec.SystemAsUser || f.LLM.SystemAsUser
	log := NewLogger(stderr, f.LogLevel)
	if ec.Views == "" || *nats == "" {
		// The state folder holds the views written here and the embedded
		// server's store: one process at a time.
		unlock, err := lockState(*state, "env serve")
		if err != nil {
			return err
		}
		defer unlock()
	}
	if ec.Views == "" {
		ec.Views = filepath.Join(*state, "env-views")
		if err := os.RemoveAll(ec.Views); err != nil {
			return fmt.Errorf("env: %w", err)
		}
		if err := writeViews(ctx, ec.Views, &f, splitList(*datasets), stderr); err != nil {
			return err
		}
	}
	if err := ec.Validate(); err != nil {
		return err
	}
	url := *nats
	var opts []bus.ConnectOption
	if url == "" {
		st, err := store.Open(ctx, f.Store, f.StoreOptions())
		if err != nil {
			return err
		}
		if err := st.CheckWritable(ctx); err != nil {
			return fmt.Errorf("%w (pass --store a directory or s3://bucket/prefix this process can write)", err)
		}
		// The in-process verifier writes to st: a run it holds that this
		// state does not know is another's (env.Config.InStore).
		ec.InStore = st.HasRun
		inProcess, stop, err := startEmbedded(*state)
		if err != nil {
			return err
		}
		defer stop()
		url, opts = bus.InProcessURL, append(opts, inProcess, bus.WithProvision(bus.ProvisionCreate))
	} else {
		auth, err := bus.AuthFromEnv(os.Getenv)
		if err != nil {
			return err
		}
		opts = append(opts, bus.WithAuth(auth), bus.WithTLS(f.NATSTLS), bus.WithProvision(f.Provision), bus.WithBlobService(env.Binary.Name), bus.WithRole(env.Binary.Name))
		if storeGiven(fs) {
			// The verifiers write elsewhere, but --store names the store
			// they write to: a run it holds that MEDGYM_RUNS does not know
			// as this server's is refused too (env.Config.InStore).
			st, err := store.Open(ctx, f.Store, f.StoreOptions())
			if err != nil {
				return err
			}
			ec.InStore = st.HasRun
		}
	}
	conn, err := bus.Connect(ctx, url, "medgym-env", log, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := bus.PrepareStreams(ctx, conn, f.Streams); err != nil {
		return err
	}
	ready := ec.Ready
	ec.Ready = func(addr string) {
		fmt.Fprintf(stderr, "medgym env: serving http://%s (OpenAPI at /openapi.json)\n", addr)
		if ready != nil {
			ready(addr)
		}
	}
	if *nats != "" {
		return env.Run(ctx, conn, ec, log.With("service", "env"))
	}
	return startEnvServices(ctx, conn, &f, ec, log)
}

// envBatchIdle is the embedded verifier's --verifier-batch-idle under env
// serve.
const envBatchIdle = 20 * time.Millisecond

// startEnvServices runs the environment server with an in-process
// sandbox-worker and verifier (the dispatcher and llm-worker have no part:
// the model is the API's client) until ctx is done.
func startEnvServices(ctx context.Context, conn *bus.Conn, f *ServiceFlags, ec env.Config, log *slog.Logger) error {
	parent := ctx
	g, ctx := errgroup.WithContext(ctx)
	metrics := bus.NewMetrics()
	if err := metrics.Serve(ctx, f.MetricsAddr, conn, log); err != nil {
		return err
	}
	_, _, sc, vc := f.Configs("")
	sc.Metrics, vc.Metrics, ec.Metrics = metrics, metrics, metrics
	g.Go(func() error {
		agent, cleanup, err := f.AgentTree()
		if err != nil {
			return err
		}
		defer cleanup()
		sc.Sandbox.DataRoot = agent
		return stopped(ctx, "sandbox-worker", sandboxworker.Run(ctx, conn, sc, log.With("service", "sandbox-worker")))
	})
	g.Go(func() error {
		return stopped(ctx, "verifier", verifier.Run(ctx, conn, vc, log.With("service", "verifier")))
	})
	g.Go(func() error { return stopped(ctx, "env", env.Run(ctx, conn, ec, log.With("service", "env"))) })
	if err := g.Wait(); err != nil && parent.Err() == nil {
		return fmt.Errorf("env serve: %w", err)
	}
	return nil
}

// stopped names a service that returned while ctx is live.
func stopped(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if err == nil {
		err = errors.New("stopped unexpectedly")
	}
	return fmt.Errorf("%s: %w", name, err)
}

// storeGiven reports whether --store was on the command line.
func storeGiven(fs *flag.FlagSet) bool {
	given := false
	fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == "store" })
	return given
}
