// Command llm-worker plays episodes: it builds prompts, asks the policy
// (an OpenAI-compatible endpoint or the reference solutions) for actions,
// and folds in observations. See README.md.
package main

import (
	"context"
	"io"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/llm-worker/llmworker"
)

func main() { bus.Main("llm-worker", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return bus.RunService(ctx, "llm-worker", "127.0.0.1:9102", args, getenv, stderr, &llmworker.Config{})
}
