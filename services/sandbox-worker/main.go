// Command sandbox-worker executes agent actions in isolated sandboxes
// (bubblewrap by default, Docker optionally). See README.md.
package main

import (
	"context"
	"io"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/sandbox-worker/sandboxworker"
)

func main() { bus.Main("sandbox-worker", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return bus.RunService(ctx, "sandbox-worker", "127.0.0.1:9103", args, getenv, stderr, &sandboxworker.Config{})
}
