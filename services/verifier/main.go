// Command verifier checks code executions against the ground truth,
// scores finished episodes and writes their trajectories to the store.
// See README.md.
package main

import (
	"context"
	"io"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/verifier/verifier"
)

func main() { bus.Main("verifier", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return bus.RunService(ctx, "verifier", "127.0.0.1:9104", args, getenv, stderr, &verifier.Config{})
}
