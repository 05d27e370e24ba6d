package bustest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// CheckCredentialsNeverLogged (issue 13 item 8) starts a service whose
// --nats URL (plus args, which may carry more credentials, each holding
// "s3cr3t") points at a closed port: the start waits for it (logging the
// wait), gives up after --connect-timeout, and neither its log nor its
// error holds the secret, while the URL is shown redacted.
func CheckCredentialsNeverLogged(t *testing.T, run RunFunc, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr strings.Builder
	args = append([]string{"--nats", "nats://alice:pw-s3cr3t@127.0.0.1:1", "--metrics", "", "--connect-timeout", "300ms"}, args...)
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

// CheckMetricsOnLoopback (issue 13 item 10: /metrics and /healthz bound
// [::] by default) reads a service's usage: its metrics default is addr
// (a loopback address) and it offers the NATS TLS flags.
func CheckMetricsOnLoopback(t *testing.T, run RunFunc, addr string) {
	t.Helper()
	var usage strings.Builder
	_ = run(context.Background(), []string{"-h"}, func(string) string { return "" }, &usage)
	if !strings.HasPrefix(addr, "127.0.0.1:") || !strings.Contains(usage.String(), `(default "`+addr+`")`) ||
		!strings.Contains(usage.String(), "-nats-ca") {
		t.Errorf("usage does not show the loopback metrics default %s and the TLS flags:\n%s", addr, usage.String())
	}
}
