package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/bus/embedded"
)

// TestOnlineNATSCA (robust item 3): `trainer online` reaches a NATS server
// whose certificate a private CA signed with --nats-ca, as every service
// does (bus.TLS). The iteration gets as far as submitting its run and
// waiting for scores (no pipeline serves it, so its short wait_timeout
// ends it); without --nats-ca the certificate is refused (the positive
// control).
func TestOnlineNATSCA(t *testing.T) {
	addr, caFile := bustest.StartJetStreamTLS(t)
	path := onlineConfig(t, "nats://"+addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var stderr bytes.Buffer
	err := run(ctx, []string{"online", "--config", path, "--nats-ca", caFile, "--connect-timeout", "30s"}, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "tls-it0000") || !strings.Contains(err.Error(), "scores") {
		t.Fatalf("with --nats-ca: err = %v, want the iteration's run waiting for its scores\n%s", err, stderr.String())
	}
	err = run(ctx, []string{"online", "--config", path, "--connect-timeout", "30s"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without --nats-ca: err = %v, want the certificate refused", err)
	}
}

// TestOnlineWaitsForNATS (robust item 1): `trainer online` started before
// its NATS server waits for it (logging so) instead of exiting, and once
// the server is up its first iteration submits its run; with a bounded
// --connect-timeout and no server it gives up with a clear error.
func TestOnlineWaitsForNATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	path := onlineConfig(t, "nats://127.0.0.1:"+strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	err = run(ctx, []string{"online", "--config", path, "--connect-timeout", "300ms"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--connect-timeout 300ms") {
		t.Fatalf("bounded wait without a server: err = %v", err)
	}
	var logs bustest.LogBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"online", "--config", path}, &bytes.Buffer{}, &logs) }()
	for !strings.Contains(logs.String(), "waiting for NATS") {
		select {
		case err := <-done:
			t.Fatalf("trainer ended without a server: %v\n%s", err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "tls-it0000") || !strings.Contains(err.Error(), "scores") {
		t.Fatalf("after the server came up: err = %v, want the iteration's run waiting for its scores\n%s", err, logs.String())
	}
}

// onlineConfig writes a one-iteration online config on natsURL whose
// wait for scores ends after a second (no pipeline serves it).
func onlineConfig(t *testing.T, natsURL string) string {
	t.Helper()
	work := t.TempDir()
	cfg := map[string]any{
		"nats": natsURL, "store": filepath.Join(work, "store"), "work_dir": filepath.Join(work, "work"),
		"run_prefix": "tls", "iterations": 1, "datasets": []string{"medcalcbench"}, "samples": 2,
		"serving":      map[string]any{"base_url": "http://127.0.0.1:1/v1", "base_model": "m"},
		"wait_timeout": "1s",
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(work, "online.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
