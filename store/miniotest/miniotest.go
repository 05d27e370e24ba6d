package miniotest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Credentials of the test server.
const (
	AccessKey = "medgym"
	SecretKey = "medgym-test-secret"
)

// readyTimeout bounds how long Start waits for the server to answer.
const readyTimeout = 60 * time.Second

// Binary returns the path of the MinIO binary and whether it exists.
func Binary() (string, bool) {
	dir := os.Getenv("MEDGYM_TOOLS")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", false
		}
		dir = filepath.Join(home, ".cache", "medgym", "bin")
	}
	p := filepath.Join(dir, "minio")
	st, err := os.Stat(p)
	return p, err == nil && !st.IsDir()
}

// Start runs a MinIO server for the test and returns its endpoint
// (host:port), credentials, and two controls: stop kills the server, and
// restart starts it again on the same port and data directory (after stop).
// The server is killed when the test ends.
func Start(t testing.TB) (endpoint, accessKey, secretKey string, stop, restart func()) {
	t.Helper()
	bin, ok := Binary()
	if !ok {
		if os.Getenv("CI") == "true" {
			t.Fatalf("miniotest: MinIO binary %s is missing: run scripts/setup.sh", bin)
		}
		t.Skipf("miniotest: MinIO binary %s is missing (run scripts/setup.sh to build it)", bin)
	}
	dataDir := t.TempDir()
	port, err := freePort()
	if err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	consolePort, err := freePort()
	if err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv := &server{
		bin: bin, dataDir: dataDir, endpoint: endpoint,
		console: net.JoinHostPort("127.0.0.1", strconv.Itoa(consolePort)),
		logPath: filepath.Join(t.TempDir(), "minio.log"),
	}
	if err := srv.start(); err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	t.Cleanup(srv.stop)
	stop = srv.stop
	restart = func() {
		t.Helper()
		if err := srv.start(); err != nil {
			t.Fatalf("miniotest: restart: %v", err)
		}
	}
	return endpoint, AccessKey, SecretKey, stop, restart
}

type server struct {
	bin, dataDir, endpoint, console, logPath string

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

func (s *server) start() error {
	if s.cmd != nil {
		return errors.New("server is already running")
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	cmd := exec.Command(s.bin, "server", s.dataDir, "--address", s.endpoint, "--console-address", s.console, "--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+AccessKey,
		"MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { // owned by the server: ends when the process exits
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	if err := s.waitReady(); err != nil {
		s.stop()
		log, _ := os.ReadFile(s.logPath)
		return fmt.Errorf("minio on %s: %w\n--- minio log ---\n%s", s.endpoint, err, log)
	}
	return nil
}

// waitReady polls the readiness endpoint until it answers 200, the process
// exits, or readyTimeout passes.
func (s *server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	url := "http://" + s.endpoint + "/minio/health/ready"
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && s.apiUp(ctx, client) {
				return nil
			}
		}
		select {
		case <-s.done:
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s", readyTimeout)
		case <-tick.C:
		}
	}
}

// apiUp reports whether the S3 API answers: right after a restart the
// health endpoint can say ready while S3 calls still get 503 "Server not
// initialized yet". An anonymous ListBuckets answers 403 once it is up.
func (s *server) apiUp(ctx context.Context, client *http.Client) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.endpoint+"/", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode != http.StatusServiceUnavailable
}

// stop kills the process (by its PID) and waits for it to exit.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
