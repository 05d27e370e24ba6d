package main

import (
	"os"
	"testing"

	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/services/sandbox-worker/sandboxworker"
)

// TestMetricsOnLoopbackByDefault (issue 13 item 10): /metrics and /healthz
// bound [::] by default.
func TestMetricsOnLoopbackByDefault(t *testing.T) {
	bustest.CheckMetricsOnLoopback(t, sandboxworker.Binary.Run, sandboxworker.Binary.MetricsAddr)
}

// TestManyWorkersOnOneHost (issue 17): a second `sandbox-worker --nats URL`
// exited at once on the taken metrics port; any number now run on one host
// with default flags (see bustest.CheckManyPerHost).
func TestManyWorkersOnOneHost(t *testing.T) {
	// Sandboxes run as uid 65534: the agent tree must be readable by others
	// (t.TempDir's parent is not).
	tree, err := os.MkdirTemp("", "medgym-agent-tree-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tree) })
	if err := os.Chmod(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	bustest.CheckManyPerHost(t, sandboxworker.Binary.Run, "sandbox-worker running", os.Getenv, "--agent-tree", tree)
}
