package bus_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/bus/embedded"
)

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitLog polls logs until it matches re or errs delivers.
func waitLog(t *testing.T, logs *bustest.LogBuffer, re *regexp.Regexp, errs <-chan error) []string {
	t.Helper()
	for {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			return m
		}
		select {
		case err := <-errs:
			t.Fatalf("start ended before %q: %v\n%s", re, err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func healthz(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestStartWaitsForNATS (robust item 1): a service started before its NATS
// server (a pod before the NATS pod, compose starting both) used to exit
// at once. With WithConnectTimeout(0) Start logs that it waits, /healthz
// answers 503 meanwhile, and once the server comes up on that address
// Start returns a working connection and /healthz turns 200.
func TestStartWaitsForNATS(t *testing.T) {
	port := freeTCPPort(t)
	url := "nats://alice:pw-s3cr3t@127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var logs bustest.LogBuffer
	type started struct {
		conn *bus.Conn
		err  error
	}
	done := make(chan started, 1)
	errs := make(chan error, 1)
	go func() {
		// The URL carries a password, so Start would only verify: this
		// server has no users and nothing provisioned, so create.
		conn, _, err := bus.Start(ctx, url, "early", "127.0.0.1:0", slog.New(slog.NewTextHandler(&logs, nil)), bus.WithConnectTimeout(0),
			bus.WithProvision(bus.ProvisionCreate))
		if err != nil {
			errs <- err
		}
		done <- started{conn, err}
	}()
	addr := waitLog(t, &logs, regexp.MustCompile(`msg="metrics and health" addr=(127\.0\.0\.1:\d+)`), errs)[1]
	waitLog(t, &logs, regexp.MustCompile(`waiting for NATS`), errs)
	if code := healthz(t, addr); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz while waiting for NATS: %d, want 503", code)
	}
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Errorf("the password is logged:\n%s", logs.String())
	}

	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	var s started
	select {
	case s = <-done:
	case <-ctx.Done():
		t.Fatalf("Start did not return after the server came up:\n%s", logs.String())
	}
	if s.err != nil {
		t.Fatalf("Start: %v", s.err)
	}
	defer s.conn.Close()
	if !bus.NATS(s.conn).IsConnected() || !strings.Contains(logs.String(), "nats connected") {
		t.Fatalf("not connected:\n%s", logs.String())
	}
	if code := healthz(t, addr); code != http.StatusOK {
		t.Errorf("/healthz once connected: %d, want 200", code)
	}
}

// TestConnectTimeout: a bounded wait gives up with a clear error naming
// the (redacted) URL and the flag; without WithConnectTimeout an
// unreachable server is an error at once (the positive control of the
// wait above: nothing else made Start succeed).
func TestConnectTimeout(t *testing.T) {
	port := freeTCPPort(t)
	url := "nats://alice:pw-s3cr3t@127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	_, err := bus.Connect(ctx, url, "bounded", log, bus.WithConnectTimeout(300*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "--connect-timeout 300ms") || !strings.Contains(err.Error(), "REDACTED@127.0.0.1") ||
		strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("bounded wait: err = %v", err)
	}
	// A Start that gives up frees its metrics address.
	maddr := "127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	if _, _, err := bus.Start(ctx, url, "bounded", maddr, log, bus.WithConnectTimeout(300*time.Millisecond)); err == nil {
		t.Fatal("Start connected to nothing")
	}
	for {
		ln, err := net.Listen("tcp", maddr)
		if err == nil {
			ln.Close()
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the metrics address of a failed Start is still held: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := bus.Connect(ctx, url, "now", log); err == nil || !strings.Contains(err.Error(), "is nats-server running") {
		t.Errorf("no wait: err = %v", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := bus.Connect(cctx, url, "stopped", log, bus.WithConnectTimeout(0)); err == nil {
		t.Error("a cancelled wait connected")
	}
}

// TestConnectTimeoutFlag: --connect-timeout takes a duration ≥ 0 and
// defaults to MEDGYM_CONNECT_TIMEOUT; a bad environment value is an error
// unless the flag overrides it.
func TestConnectTimeoutFlag(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		want time.Duration
		bad  bool
	}{
		{"", nil, 0, false},
		{"90s", nil, 90 * time.Second, false},
		{"", []string{"--connect-timeout", "2m"}, 2 * time.Minute, false},
		{"soon", nil, 0, true},
		{"soon", []string{"--connect-timeout", "5s"}, 5 * time.Second, false},
		{"", []string{"--connect-timeout", "-1s"}, 0, true},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f bus.StartFlags
		f.RegisterFlags(fs, oneEnv("MEDGYM_CONNECT_TIMEOUT", c.env))
		err := fs.Parse(c.args)
		if err == nil {
			_, err = f.Options()
		}
		if (err != nil) != c.bad || !c.bad && f.ConnectTimeout != c.want {
			t.Errorf("env %q args %v: %s, err %v; want %s, error %v", c.env, c.args, f.ConnectTimeout, err, c.want, c.bad)
		}
	}
}
