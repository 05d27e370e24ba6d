package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus/bustest"
)

// TestCredentialsNeverLogged (issue 13 item 8): --nats and --llm-url with
// user:password were logged in clear at start-up.
func TestCredentialsNeverLogged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr strings.Builder
	args := []string{"--nats", "nats://alice:pw-s3cr3t@127.0.0.1:1", "--metrics", ""}
	args = append(args, "--llm-url", "http://bob:key-s3cr3t@127.0.0.1:1/v1")
	err := run(ctx, args, func(string) string { return "" }, &stderr)
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	out := stderr.String() + err.Error()
	if strings.Contains(out, "s3cr3t") {
		t.Errorf("credentials in the output:\n%s", out)
	}
	if !strings.Contains(out, "nats://REDACTED@127.0.0.1:1") {
		t.Errorf("the NATS URL is not shown (redacted):\n%s", out)
	}
}

// TestMetricsOnLoopbackByDefault (issue 13 item 10): /metrics and /healthz
// bound [::] by default.
func TestMetricsOnLoopbackByDefault(t *testing.T) {
	var usage strings.Builder
	_ = run(context.Background(), []string{"-h"}, func(string) string { return "" }, &usage)
	if !strings.Contains(usage.String(), `(default "127.0.0.1:9102")`) || !strings.Contains(usage.String(), "-nats-ca") {
		t.Errorf("usage does not show a loopback metrics default and the TLS flags:\n%s", usage.String())
	}
}

// TestManyWorkersOnOneHost (issue 17): any number of llm-workers on one
// host with default flags (see bustest.CheckManyPerHost).
func TestManyWorkersOnOneHost(t *testing.T) {
	bustest.CheckManyPerHost(t, run, "llm-worker running", os.Getenv)
}
