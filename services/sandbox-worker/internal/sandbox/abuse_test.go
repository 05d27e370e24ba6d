package sandbox

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

func TestAbuse(t *testing.T) {
	// A secret in the worker's environment must never reach agent code.
	t.Setenv("AWS_SECRET_ACCESS_KEY", "medgym-fake-secret-4242")
	for name, mk := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // backends are independent; most of the time is waiting on timeouts
			abuse(t, mk)
		})
	}
}

// sandboxProcs lists host processes whose command line contains marker.
func sandboxProcs(marker string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), marker) {
			out = append(out, e.Name())
		}
	}
	return out
}

// abuse runs hostile code against a backend: each attack must be contained,
// reported in the ExecResult, and leave the worker able to serve.
func abuse(t *testing.T, mk constructor) {
	outside := openTempDir(t)
	secret := filepath.Join(outside, "host-secret.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := openTempDir(t)
	if err := os.MkdirAll(filepath.Join(data, "toy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "toy", "t.csv"), []byte("a\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := mk(t, Config{DataRoot: data})
	healthy := func(t *testing.T) {
		t.Helper()
		r := exec1(t, s, code(newEpisode(), "print('alive')", 20))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "alive" {
			t.Fatalf("worker unhealthy after the attack: %+v", r)
		}
	}

	t.Run("network egress", func(t *testing.T) {
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				accepted <- struct{}{}
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		src := fmt.Sprintf(`import socket
def attempt(name, f):
    try:
        f()
        print(name, "REACHED")
    except Exception as e:
        print(name, "blocked", type(e).__name__)
def tcp(host, port):
    s = socket.create_connection((host, port), timeout=3); s.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("8.8.8.8", 53))
attempt("tcp-public", lambda: tcp("1.1.1.1", 443))
attempt("tcp-host", lambda: tcp("172.17.0.1", %d))
attempt("tcp-loopback-host", lambda: tcp("127.0.0.1", %d))
attempt("udp", udp)
attempt("dns", lambda: socket.getaddrinfo("example.com", 80))
`, port, port)
		r := exec1(t, s, code(newEpisode(), src, 20))
		if strings.Contains(r.Stdout, "REACHED") || strings.Count(r.Stdout, "blocked") != 5 {
			t.Fatalf("network reachable: %+v", r)
		}
		select {
		case <-accepted:
			t.Fatal("sandbox connected to a host listener")
		default:
		}
	})
	t.Run("host files and env", func(t *testing.T) {
		src := fmt.Sprintf(`import os, glob
found = []
for p in [%q, "/root", "/etc/shadow", "/home", "/work/../etc/shadow"]:
    try:
        if os.path.isdir(p): found.append((p, os.listdir(p)))
        else: found.append((p, open(p).read()))
    except Exception as e:
        pass
env = dict(os.environ)
procs = ""
for f in glob.glob("/proc/*/environ"):
    try: procs += open(f, "rb").read().decode(errors="replace")
    except Exception: pass
print("FOUND", found)
print("ENV", sorted(env))
print("LEAK", "medgym-fake-secret" in procs or "AWS_SECRET" in str(env))
print("ROOT", sorted(os.listdir("/")))
`, secret)
		r := exec1(t, s, code(newEpisode(), src, 20))
		if r.Status != schemas.StatusOK || strings.Contains(r.Stdout, "TOPSECRET") || !strings.Contains(r.Stdout, "LEAK False") {
			t.Fatalf("host data leaked: %+v", r)
		}
		if !strings.Contains(r.Stdout, "FOUND []") {
			t.Fatalf("host paths visible: %s", r.Stdout)
		}
		if strings.Contains(r.Stdout, "AWS_") || strings.Contains(r.Stdout, "GOPATH") {
			t.Fatalf("worker env leaked: %s", r.Stdout)
		}
	})
	t.Run("write to read-only data and system", func(t *testing.T) {
		src := `import os
for p in ["/data/toy/t.csv", "/data/toy/new.csv", "/usr/evil", "/etc/passwd", "/evil"]:
    try:
        open(p, "a").write("x"); print(p, "WRITTEN")
    except OSError as e:
        print(p, "denied", e.errno)
`
		r := code(newEpisode(), src, 20)
		r.Resources = []string{"toy"}
		res := exec1(t, s, r)
		if strings.Contains(res.Stdout, "WRITTEN") || strings.Count(res.Stdout, "denied") != 5 {
			t.Fatalf("wrote to read-only path: %+v", res)
		}
		if b, _ := os.ReadFile(filepath.Join(data, "toy", "t.csv")); string(b) != "a\n1\n" {
			t.Fatalf("data modified: %q", b)
		}
	})
	t.Run("another episode's workspace", func(t *testing.T) {
		a := newEpisode()
		exec1(t, s, code(a, "open('mine.txt','w').write('PRIVATE-A')", 20))
		src := fmt.Sprintf(`import os
hits = []
for root in [%q, "/work/..", "/tmp", "/"]:
    for d, _, files in os.walk(root):
        if d.startswith("/proc") or d.startswith("/usr") or d.startswith("/sys"): continue
        for f in files:
            if f == "mine.txt": hits.append(os.path.join(d, f))
print("HITS", hits)
`, s.workspacePath(a))
		r := exec1(t, s, code(newEpisode(), src, 30))
		if !strings.Contains(r.Stdout, "HITS []") {
			t.Fatalf("other workspace visible: %+v", r)
		}
	})
	t.Run("fork bomb", func(t *testing.T) {
		r := exec1(t, s, code(newEpisode(), "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", 5))
		if r.Status == schemas.StatusOK || r.Status == schemas.StatusSandboxError {
			t.Fatalf("fork bomb: %+v", r)
		}
		t.Logf("fork bomb -> %s: %.200s", r.Status, r.Message)
		healthy(t)
	})
	t.Run("memory bomb", func(t *testing.T) {
		r := exec1(t, s, code(newEpisode(), "x = bytearray(8 << 30)\nprint('allocated')", 20))
		if r.Status == schemas.StatusOK || !(strings.Contains(r.Message, "MemoryError") || strings.Contains(r.Message, "memory limit")) {
			t.Fatalf("big allocation: %+v", r)
		}
		r = exec1(t, s, code(newEpisode(), "l = []\nwhile True:\n    l.append(bytearray(32 << 20))", 30))
		if r.Status == schemas.StatusOK || !(strings.Contains(r.Message, "MemoryError") || strings.Contains(r.Message, "memory limit")) {
			t.Fatalf("gradual allocation: %+v", r)
		}
		healthy(t)
	})
	t.Run("infinite loop", func(t *testing.T) {
		begin := time.Now()
		r := exec1(t, s, code(newEpisode(), "while True: pass", 2))
		if r.Status != schemas.StatusTimeout || time.Since(begin) > 15*time.Second {
			t.Fatalf("loop: %+v after %v", r, time.Since(begin))
		}
		healthy(t)
	})
	t.Run("1 GB of output", func(t *testing.T) {
		begin := time.Now()
		r := exec1(t, s, code(newEpisode(), "import sys\nb = 'x' * (1 << 20)\nfor i in range(1024):\n    sys.stdout.write(b)", 60))
		limit := testLimits().OutputBytes
		if !r.Truncated || len(r.Stdout) > limit+200 || !strings.Contains(r.Stdout, "output truncated") {
			t.Fatalf("output not capped: truncated=%v len=%d status=%s", r.Truncated, len(r.Stdout), r.Status)
		}
		if len(r.Message) > 2*limit+1000 {
			t.Fatalf("message not capped: %d bytes", len(r.Message))
		}
		t.Logf("1 GB output -> %s in %v", r.Status, time.Since(begin))
		healthy(t)
	})
	t.Run("huge file", func(t *testing.T) {
		ep := newEpisode()
		r := exec1(t, s, code(ep, "with open('big.bin','wb') as f:\n    for i in range(100):\n        f.write(b'x' * (1 << 20))", 30))
		if r.Status == schemas.StatusOK {
			t.Fatalf("huge file written: %+v", r)
		}
		st, err := os.Stat(filepath.Join(s.workspacePath(ep), "big.bin"))
		if err == nil && st.Size() > testLimits().FileSizeBytes {
			t.Fatalf("file grew to %d bytes", st.Size())
		}
		healthy(t)
	})
	t.Run("kill the parent", func(t *testing.T) {
		ep := newEpisode()
		r := exec1(t, s, code(ep, "import os, signal\nfor p in (os.getppid(), 1):\n    try: os.kill(p, signal.SIGKILL)\n    except OSError as e: print('denied', p)\nprint('still here')", 20))
		if r.Status == schemas.StatusSandboxError {
			t.Fatalf("kill parent broke the sandbox: %+v", r)
		}
		r = exec1(t, s, code(ep, "print('next turn')", 20))
		if strings.TrimSpace(r.Stdout) != "next turn" {
			t.Fatalf("episode unusable after killing the parent: %+v", r)
		}
		healthy(t)
	})
	t.Run("symlink tricks", func(t *testing.T) {
		ep := newEpisode()
		src := fmt.Sprintf(`import os
os.symlink(%q, "s1")
os.symlink("/", "s2")
os.symlink(%q, "s3")
for p in ["s1", "s2/root", "s3/host-secret.txt"]:
    try: print(p, open(p).read())
    except Exception as e: print(p, "blocked", type(e).__name__)
`, secret, outside)
		r := exec1(t, s, code(ep, src, 20))
		if strings.Contains(r.Stdout, "TOPSECRET") {
			t.Fatalf("symlink escaped: %+v", r)
		}
		// The worker side must not follow the links either: release removes
		// the links, never their targets.
		if err := s.Release(ep); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(secret); err != nil || string(b) != "TOPSECRET" {
			t.Fatalf("release followed a symlink out of the workspace: %v", err)
		}
	})
	t.Run("background processes die with the run", func(t *testing.T) {
		marker := fmt.Sprintf("sleep 31%d", os.Getpid()%1000)
		r := exec1(t, s, term(newEpisode(), "("+marker+" &) ; nohup "+marker+" >/dev/null 2>&1 & echo started", 20))
		if r.Status != schemas.StatusOK {
			t.Fatalf("got %+v", r)
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(sandboxProcs(marker)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("background processes survive the run: %v", sandboxProcs(marker))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
