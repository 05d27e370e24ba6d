package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus/bustest"
)

// TestOnlineNATSCA (robust item 3): `trainer online` reaches a NATS server
// whose certificate a private CA signed with --nats-ca, as every service
// does (bus.TLS). The iteration gets as far as submitting its run and
// waiting for scores (no pipeline serves it, so its short wait_timeout
// ends it); without --nats-ca the certificate is refused (the positive
// control).
func TestOnlineNATSCA(t *testing.T) {
	addr, caFile := bustest.StartJetStreamTLS(t)
	work := t.TempDir()
	cfg := map[string]any{
		"nats": "nats://" + addr, "store": filepath.Join(work, "store"), "work_dir": filepath.Join(work, "work"),
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var stderr bytes.Buffer
	err = run(ctx, []string{"online", "--config", path, "--nats-ca", caFile, "--connect-timeout", "30s"}, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "tls-it0000") || !strings.Contains(err.Error(), "scores") {
		t.Fatalf("with --nats-ca: err = %v, want the iteration's run waiting for its scores\n%s", err, stderr.String())
	}
	err = run(ctx, []string{"online", "--config", path, "--connect-timeout", "30s"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without --nats-ca: err = %v, want the certificate refused", err)
	}
}
