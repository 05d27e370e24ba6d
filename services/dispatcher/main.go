// Command dispatcher takes run specs and emits episode requests with
// admission control. See README.md.
package main

import (
	"context"
	"io"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/dispatcher/dispatcher"
)

func main() { bus.Main("dispatcher", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return bus.RunService(ctx, "dispatcher", "127.0.0.1:9101", args, getenv, stderr, &dispatcher.Config{})
}
