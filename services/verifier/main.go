// Command verifier checks code executions against the ground truth,
// scores finished episodes and writes their trajectories to the store.
// See README.md.
package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/verifier/service"
)

func main() { bus.Main("verifier", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg service.Config
	return bus.RunService(ctx, "verifier", "127.0.0.1:9104", args, getenv, stderr, &cfg,
		func(ctx context.Context, conn *bus.Conn, m *bus.Metrics, log *slog.Logger) error {
			cfg.Metrics = m
			return service.Run(ctx, conn, cfg, log)
		})
}
