package llmworker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
)

// RegisterFlags adds the llm-worker's flags; getenv is their environment
// fallback and where API keys are read from.
func (c *Config) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	host, _ := os.Hostname()
	c.LLM.Getenv = getenv
	fs.StringVar(&c.DataRoot, "data", bus.EnvOr(getenv, "MEDGYM_DATA", "../shared/data"), "shared data root, for reference solutions (env MEDGYM_DATA)")
	fs.StringVar(&c.TasksDir, "tasks-dir", "", "upstream MedAgentGym task folder")
	fs.StringVar(&c.LibraryDir, "library", bus.EnvOr(getenv, "MEDGYM_LIBRARY", "build/library"), "generated task library (env MEDGYM_LIBRARY)")
	fs.IntVar(&c.Concurrency, "concurrency", 32, "episode steps at once")
	fs.StringVar(&c.LLM.DefaultBaseURL, "llm-url", getenv("MEDGYM_LLM_URL"), "default OpenAI-compatible base URL (env MEDGYM_LLM_URL); user:password@ in it stays in this process (run specs carry the URL without it); API keys come from the spec's api_key_env variable or its _FILE")
	fs.StringVar(&c.LLM.CAFile, "llm-ca", getenv("MEDGYM_LLM_CA"), "PEM file of a private CA trusted for https:// model endpoints, besides the system's (env MEDGYM_LLM_CA)")
	fs.DurationVar(&c.LLM.Timeout, "llm-timeout", 5*time.Minute, "timeout of one model request")
	fs.IntVar(&c.LLM.MaxRetries, "llm-retries", 4, "retries of a failing model request (429, 5xx, timeouts); 0: none")
	fs.IntVar(&c.LLM.MaxConcurrent, "llm-max-concurrent", 8, "requests in flight per endpoint")
	fs.BoolVar(&c.LLM.NoTemperature, "no-temperature", false, "omit temperature/top_p (models that refuse them, e.g. OpenAI o-series)")
	fs.BoolVar(&c.LLM.UseMaxCompletionTokens, "max-completion-tokens", false, "send max_completion_tokens instead of max_tokens (reasoning models)")
	fs.StringVar(&c.Debugger.BaseURL, "debugger-url", "", "base URL of the debug action's model (default: the episode's endpoint)")
	fs.StringVar(&c.Debugger.Model, "debugger-model", "", "model answering the debug action (default: the episode's model)")
	fs.StringVar(&c.Debugger.APIKeyEnv, "debugger-api-key-env", "", "environment variable holding the debugger's API key (default: the episode's)")
	fs.BoolVar(&c.SystemAsUser, "system-as-user", false, "fold the system prompt into the first user message")
	fs.StringVar(&c.Worker, "name", host+"/llm-worker", "worker name recorded in trajectories")
	fs.DurationVar(&c.EpisodeClock, "episode-clock", time.Hour, "time limit of an episode whose run sets none (--episode-timeout 0): its model call is cancelled and it ends as a timeout; also how long its model calls wait out an endpoint that is down (0: no limit)")
	fs.DurationVar(&c.AckWait, "ack-wait", 60*time.Second, "how long a message may go unacked (in-progress acks keep long work alive) before another process gets it")
}

// Validate rejects values the worker would misread: a negative retry
// count used to fall back to a default.
func (c Config) Validate() error {
	switch {
	case c.LLM.MaxRetries < 0:
		return fmt.Errorf("--llm-retries %d: must be ≥ 0 (0: none)", c.LLM.MaxRetries)
	case c.Concurrency < 0:
		return fmt.Errorf("--concurrency %d: must be ≥ 1 (0: the default)", c.Concurrency)
	case c.LLM.Timeout < 0:
		return fmt.Errorf("--llm-timeout %s: must be positive", c.LLM.Timeout)
	case c.LLM.MaxConcurrent < 0:
		return fmt.Errorf("--llm-max-concurrent %d: must be ≥ 1 (0: the default)", c.LLM.MaxConcurrent)
	case c.AckWait < 0:
		return errors.New("--ack-wait must be positive")
	case c.EpisodeClock < 0:
		return fmt.Errorf("--episode-clock %s: must be ≥ 0 (0: no limit)", c.EpisodeClock)
	}
	return nil
}

// LogValue is the configuration logged at start; API keys are never in
// it, and credentials in the model URL are redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("data", c.DataRoot), slog.String("llm_url", schemas.RedactURL(c.LLM.DefaultBaseURL)),
		slog.Int("concurrency", c.Concurrency), slog.String("worker", c.Worker))
}

// Serve runs the llm-worker with this configuration, measured by metrics.
func (c Config) Serve(ctx context.Context, conn *bus.Conn, metrics *bus.Metrics, log *slog.Logger) error {
	c.Metrics = metrics
	return Run(ctx, conn, c, log)
}
