package bustest

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// RunFunc is a service's run: its flags, environment and log.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error

// CheckManyPerHost (issue 17) starts three processes of one service kind
// against one JetStream server with default flags plus args (a second
// `llm-worker --nats URL` used to exit at once with "metrics listen
// 127.0.0.1:9102: bind: address already in use"): all three must log
// running (a line containing running), at least two must warn about the
// taken metrics port, and a fourth with --metrics-required must fail with
// the bind error (the positive control). getenv is the environment
// (MEDGYM_METRICS* and MEDGYM_NATS are hidden from it).
func CheckManyPerHost(t *testing.T, run RunFunc, running string, getenv func(string) string, args ...string) {
	t.Helper()
	url := StartJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := func(k string) string {
		if strings.HasPrefix(k, "MEDGYM_METRICS") || k == "MEDGYM_NATS" {
			return ""
		}
		return getenv(k)
	}
	args = append([]string{"--nats", url}, args...)
	wctx, stop := context.WithCancel(ctx)
	var logs [3]LogBuffer
	errs := make(chan error, len(logs))
	for i := range logs {
		go func() { errs <- run(wctx, args, env, &logs[i]) }()
	}
	for i := range logs {
		for !strings.Contains(logs[i].String(), running) {
			select {
			case err := <-errs:
				t.Fatalf("a process ended: %v\n%s", err, logs[i].String())
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
		t.Errorf("%d processes warned about the taken metrics port, want at least 2", warned)
	}
	err := run(ctx, append(args, "--metrics-required"), env, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("--metrics-required on a taken port: %v", err)
	}
	stop()
	for range logs {
		if err := <-errs; err != nil {
			t.Errorf("process: %v", err)
		}
	}
}
