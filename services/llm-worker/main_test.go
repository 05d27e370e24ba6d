package main

import (
	"os"
	"testing"

	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/services/llm-worker/llmworker"
)

// TestCredentialsNeverLogged (issue 13 item 8): --nats and --llm-url with
// user:password were logged in clear at start-up.
func TestCredentialsNeverLogged(t *testing.T) {
	bustest.CheckCredentialsNeverLogged(t, llmworker.Binary.Run, "--llm-url", "http://bob:key-s3cr3t@127.0.0.1:1/v1")
}

// TestMetricsOnLoopbackByDefault (issue 13 item 10): /metrics and /healthz
// bound [::] by default.
func TestMetricsOnLoopbackByDefault(t *testing.T) {
	bustest.CheckMetricsOnLoopback(t, llmworker.Binary.Run, llmworker.Binary.MetricsAddr)
}

// TestManyWorkersOnOneHost (issue 17): any number of llm-workers on one
// host with default flags (see bustest.CheckManyPerHost).
func TestManyWorkersOnOneHost(t *testing.T) {
	bustest.CheckManyPerHost(t, llmworker.Binary.Run, "llm-worker running", os.Getenv)
}
