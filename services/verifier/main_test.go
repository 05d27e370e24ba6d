package main

import (
	"context"
	"strings"
	"testing"

	"github.com/medgym/medgym/services/verifier/verifier"
)

// TestMetricsOnLoopbackByDefault (issue 13 item 10): /metrics and /healthz
// bound [::] by default.
func TestMetricsOnLoopbackByDefault(t *testing.T) {
	var usage strings.Builder
	_ = verifier.Binary.Run(context.Background(), []string{"-h"}, func(string) string { return "" }, &usage)
	if !strings.Contains(usage.String(), `(default "127.0.0.1:9104")`) || !strings.Contains(usage.String(), "-nats-ca") {
		t.Errorf("usage does not show a loopback metrics default and the TLS flags:\n%s", usage.String())
	}
}
