package systemtest

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/services/dispatcher/dispatcher"
	"github.com/medgym/medgym/services/llm-worker/llmworker"
	"github.com/medgym/medgym/services/sandbox-worker/sandboxworker"
	"github.com/medgym/medgym/services/verifier/verifier"
)

// goServices runs the CLI's in-process services, built from f as `medgym
// run` builds them (f.Configs), until the test ends. connFor gives each
// service its connection; agentTree is the sandbox's task data; the
// services named in skip are not started (a test starting its own).
func goServices(t *testing.T, ctx context.Context, f *cli.RunFlags, connFor func(service string) *bus.Conn, m *bus.Metrics,
	log *slog.Logger, agentTree string, skip ...string) {
	t.Helper()
	dc, lc, sc, vc := f.Configs("")
	dc.Metrics, lc.Metrics, sc.Metrics, vc.Metrics = m, m, m, m
	lc.Worker, sc.Worker, sc.Sandbox.DataRoot = "llm", "sandbox", agentTree
	svcCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for name, run := range map[string]func(context.Context, *bus.Conn) error{
		"dispatcher":     func(ctx context.Context, c *bus.Conn) error { return dispatcher.Run(ctx, c, dc, log) },
		"llm-worker":     func(ctx context.Context, c *bus.Conn) error { return llmworker.Run(ctx, c, lc, log) },
		"sandbox-worker": func(ctx context.Context, c *bus.Conn) error { return sandboxworker.Run(ctx, c, sc, log) },
		"verifier":       func(ctx context.Context, c *bus.Conn) error { return verifier.Run(ctx, c, vc, log) },
	} {
		if slices.Contains(skip, name) {
			continue
		}
		conn := connFor(name)
		wg.Go(func() {
			if err := run(svcCtx, conn); err != nil && svcCtx.Err() == nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
}
