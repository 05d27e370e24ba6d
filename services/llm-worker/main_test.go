package main

import (
	"context"
	"io"
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

// TestManyWorkersOnOneHost (issue 17): a second `llm-worker --nats URL`
// exited at once with "metrics listen 127.0.0.1:9102: bind: address already
// in use". Three start with default flags and all run; --metrics-required
// turns the taken port back into an error (the positive control).
func TestManyWorkersOnOneHost(t *testing.T) {
	url := bustest.StartJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	getenv := func(k string) string {
		if strings.HasPrefix(k, "MEDGYM_METRICS") || k == "MEDGYM_NATS" {
			return ""
		}
		return os.Getenv(k)
	}
	wctx, stop := context.WithCancel(ctx)
	var logs [3]bustest.LogBuffer
	errs := make(chan error, len(logs))
	for i := range logs {
		go func() { errs <- run(wctx, []string{"--nats", url}, getenv, &logs[i]) }()
	}
	for i := range logs {
		for !strings.Contains(logs[i].String(), "llm-worker running") {
			select {
			case err := <-errs:
				t.Fatalf("a worker ended: %v\n%s", err, logs[i].String())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	warned := 0
	for i := range logs {
		if strings.Contains(logs[i].String(), "running without /metrics") {
			warned++
		}
	}
	if warned < 2 {
		t.Errorf("%d workers warned about the taken metrics port, want at least 2", warned)
	}
	err := run(ctx, []string{"--nats", url, "--metrics-required"}, getenv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("--metrics-required on a taken port: %v", err)
	}
	stop()
	for range logs {
		if err := <-errs; err != nil {
			t.Errorf("worker: %v", err)
		}
	}
}
