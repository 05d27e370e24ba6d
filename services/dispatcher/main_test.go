package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestCredentialsNeverLogged (issue 13 item 8): --nats with user:password
// was logged in clear at start-up.
func TestCredentialsNeverLogged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr strings.Builder
	args := []string{"--nats", "nats://alice:pw-s3cr3t@127.0.0.1:1", "--metrics", ""}
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
	if !strings.Contains(usage.String(), `(default "127.0.0.1:9101")`) || !strings.Contains(usage.String(), "-nats-ca") {
		t.Errorf("usage does not show a loopback metrics default and the TLS flags:\n%s", usage.String())
	}
}
