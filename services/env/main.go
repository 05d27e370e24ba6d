// Command env-server is medgym's environment API: HTTP/JSON sessions over
// the same bus, sandbox-worker and verifier a run uses, for RL frameworks
// that run their own rollout loop. See README.md.
package main

import (
	"context"
	"io"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/env/env"
)

func main() { bus.Main("env-server", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return bus.RunService(ctx, "env-server", "127.0.0.1:9105", args, getenv, stderr, &env.Config{})
}
