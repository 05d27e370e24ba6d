// Command llm-worker plays episodes: it builds prompts, asks the policy
// (an OpenAI-compatible endpoint or the reference solutions) for actions,
// and folds in observations. See README.md.
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
	"github.com/medgym/medgym/services/llm-worker/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "llm-worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("llm-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	natsURL := fs.String("nats", envOr(getenv, "MEDGYM_NATS", "nats://127.0.0.1:4222"), "NATS URL, or several seed URLs of a cluster comma-separated (env MEDGYM_NATS)")
	data := fs.String("data", envOr(getenv, "MEDGYM_DATA", "../shared/data"), "shared data root, for reference solutions (env MEDGYM_DATA)")
	tasksDir := fs.String("tasks-dir", "", "upstream MedAgentGym task folder")
	conc := fs.Int("concurrency", 32, "episode steps at once")
	llmURL := fs.String("llm-url", getenv("MEDGYM_LLM_URL"), "default OpenAI-compatible base URL (env MEDGYM_LLM_URL); user:password@ in it stays in this process (run specs carry the URL without it); API keys come from the spec's api_key_env variable or its _FILE")
	llmCA := fs.String("llm-ca", getenv("MEDGYM_LLM_CA"), "PEM file of a private CA trusted for https:// model endpoints, besides the system's (env MEDGYM_LLM_CA)")
	timeout := fs.Duration("llm-timeout", 5*time.Minute, "timeout of one model request")
	retries := fs.Int("llm-retries", 4, "retries of a failing model request (0: none)")
	maxConc := fs.Int("llm-max-concurrent", 8, "requests in flight per endpoint")
	noTemp := fs.Bool("no-temperature", false, "omit temperature/top_p (models that refuse them)")
	maxCompletion := fs.Bool("max-completion-tokens", false, "send max_completion_tokens instead of max_tokens")
	dbgURL := fs.String("debugger-url", "", "base URL of the debug action's model (default: the episode's endpoint)")
	dbgModel := fs.String("debugger-model", "", "model answering the debug action (default: the episode's model)")
	dbgKeyEnv := fs.String("debugger-api-key-env", "", "environment variable holding the debugger's API key (default: the episode's)")
	systemAsUser := fs.Bool("system-as-user", false, "fold the system prompt into the first user message")
	name := fs.String("name", host+"/llm-worker", "worker name recorded in trajectories")
	library := fs.String("library", envOr(getenv, "MEDGYM_LIBRARY", "build/library"), "generated task library (env MEDGYM_LIBRARY)")
	metricsAddr := fs.String("metrics", envOr(getenv, "MEDGYM_METRICS", "127.0.0.1:9102"), "address of /metrics and /healthz: loopback by default; in a container or pod its own IP or host name (e.g. $POD_IP:9102); port 0 picks a free port (logged); taken: a warning (see --metrics-required); empty: off (env MEDGYM_METRICS)")
	var natsTLS bus.TLS
	natsTLS.RegisterFlags(fs, getenv)
	var start bus.StartFlags
	start.RegisterFlags(fs, getenv)
	ackWait := fs.Duration("ack-wait", 60*time.Second, "how long a message may go unacked (in-progress acks keep long work alive) before another process gets it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *retries < 0 {
		return fmt.Errorf("--llm-retries %d: must be ≥ 0 (0: none)", *retries)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "llm-worker")
	log.Info("config", "nats", schemas.RedactURL(*natsURL), "data", *data, "llm_url", schemas.RedactURL(*llmURL), "concurrency", *conc) // API keys are never logged
	auth, err := bus.AuthFromEnv(getenv)
	if err != nil {
		return err
	}
	startOpts, err := start.Options()
	if err != nil {
		return err
	}
	conn, metrics, err := bus.Start(ctx, *natsURL, "llm-worker", *metricsAddr, log, append(startOpts, bus.WithTLS(natsTLS), bus.WithAuth(auth))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	return service.Run(ctx, conn, service.Config{Metrics: metrics, AckWait: *ackWait,
		DataRoot: *data, TasksDir: *tasksDir, LibraryDir: *library, Concurrency: *conc, Worker: *name, SystemAsUser: *systemAsUser,
		LLM: service.ClientDefaults{DefaultBaseURL: *llmURL, CAFile: *llmCA, Timeout: *timeout, MaxRetries: *retries, MaxConcurrent: *maxConc,
			NoTemperature: *noTemp, UseMaxCompletionTokens: *maxCompletion, Getenv: getenv},
		Debugger: service.DebuggerConfig{BaseURL: *dbgURL, Model: *dbgModel, APIKeyEnv: *dbgKeyEnv},
	}, log)
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}
