// Command llm-worker plays episodes: it builds prompts, asks the policy
// (an OpenAI-compatible endpoint or the reference solutions) for actions,
// and folds in observations. See README.md.
package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/llm-worker/service"
)

func main() { bus.Main("llm-worker", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg service.Config
	return bus.RunService(ctx, "llm-worker", "127.0.0.1:9102", args, getenv, stderr, &cfg,
		func(ctx context.Context, conn *bus.Conn, m *bus.Metrics, log *slog.Logger) error {
			cfg.Metrics = m
			return service.Run(ctx, conn, cfg, log)
		})
}
