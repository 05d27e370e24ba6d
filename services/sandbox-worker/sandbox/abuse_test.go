package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/medgym/medgym/schemas"
)

func TestAbuse(t *testing.T) {
	// A secret in the worker's environment (TestMain puts it there) must
	// never reach agent code.
	t.Parallel()
	for name, mk := range backends() {
		if name == "docker" {
			// On-demand Docker containers and pooled ones are made by the same
			// code with the same settings (TestDockerPool compares them field by
			// field), so the attacks run once, on the pool (the default), and
			// the on-demand backend keeps the conformance suite. Each attack
			// costs a container start, which is most of this package's time.
			continue
		}
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
	// healthy checks that the worker still serves after an attack, through an
	// episode of its own that lives across the attacks (one sandbox, not one
	// per attack); the last subtest checks that a new episode still starts.
	probe := newEpisode()
	healthy := func(t *testing.T) {
		t.Helper()
		r := exec1(t, s, code(probe, "print('alive')", 20))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "alive" {
			t.Fatalf("worker unhealthy after the attack: %+v", r)
		}
	}
	defer t.Run("a new episode starts after every attack", func(t *testing.T) {
		r := exec1(t, s, code(newEpisode(), "print('alive')", 20))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "alive" {
			t.Fatalf("worker unhealthy after the attacks: %+v", r)
		}
	})

	t.Run("disk fill", func(t *testing.T) {
		ep := newEpisode()
		src := `import os
i = 0
while True:
    with open(f"/work/fill{i}", "wb") as f:
        f.write(os.urandom(4 << 20))
    i += 1
`
		r := exec1(t, s, code(ep, src, 60))
		if r.Status != schemas.StatusKilled || !strings.Contains(r.Message, "disk quota of 64 MiB") {
			t.Fatalf("filling the workspace: %s %q", r.Status, r.Message)
		}
		if used, err := diskUsage(s.workspacePath(ep)); err != nil || used > (64+128)<<20 {
			t.Fatalf("workspace holds %d MiB after the kill (quota 64 MiB): %v", used>>20, err)
		}
		// Over the quota, the code may still delete files and go on.
		r = exec1(t, s, code(ep, "import glob, os\nfor f in glob.glob('/work/fill*'): os.remove(f)\nopen('/work/small', 'w').write('ok')\nprint('clean')", 20))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "clean" {
			t.Fatalf("cleaning up after the quota: %+v", r)
		}
		healthy(t)
	})
	t.Run("inode flood", func(t *testing.T) {
		// Empty files, symlinks (and directories, small ones) take no or
		// few blocks: the byte quota never saw them (850k files in one
		// episode before); the file count limit (Limits.DiskInodes, 1000
		// here) stops them.
		ep := newEpisode()
		r := exec1(t, s, code(ep, inodeFloodSrc, 30))
		u, err := walkUsage(s.workspacePath(ep), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s after %d ms, %d entries: %s", r.Status, r.DurationMS, u.entries, r.Message)
		if s.diskQuota == DiskQuotaProject && s.cfg.Backend == BackendBwrap { // the kernel's inode limit
			if r.Status != schemas.StatusError || !quotaHit(r.Stdout) || !strings.Contains(r.Message, "1000 files and directories") || u.entries >= 1000 {
				t.Fatalf("inode flood: %s %q, %d entries", r.Status, r.Message, u.entries)
			}
		} else if r.Status != schemas.StatusKilled || !strings.Contains(r.Message, "limit of 1000 files and directories") || u.entries > 4*1000 {
			t.Fatalf("inode flood: %s %q, %d entries", r.Status, r.Message, u.entries)
		}
		// Over the limit, the code may still delete files and go on.
		r = exec1(t, s, term(ep, "find /work -mindepth 1 -delete; ls -A /work | wc -l", 30))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "0" {
			t.Fatalf("cleaning up %d entries: %+v", u.entries, r)
		}
		healthy(t)
	})
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
print("LEAK", %q in procs or "AWS_SECRET" in str(env))
print("ROOT", sorted(os.listdir("/")))
`, secret, fakeSecret)
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
	t.Run("shared memory bomb", func(t *testing.T) {
		// Shared anonymous memory is not data: RLIMIT_DATA lets it through,
		// and only the memory cgroup (or the container's) stops it. One byte
		// per page faults every page in with little CPU (an emulated VM ran
		// into the CPU limit copying whole megabytes before the memory limit).
		if s.cgParent == nil && s.cfg.Backend == BackendBwrap {
			t.Skip("no cgroups here: rlimits alone cannot bound shared memory")
		}
		r := exec1(t, s, code(newEpisode(), "import mmap\nm = mmap.mmap(-1, 2 << 30)\nfor i in range(0, 2 << 30, 4096):\n    m[i] = 1\nprint('filled')", 60))
		if r.Status != schemas.StatusKilled || !strings.Contains(r.Message, "memory limit") {
			t.Fatalf("2 GiB of shared memory: %+v", r)
		}
		healthy(t)
	})
	t.Run("infinite loop", func(t *testing.T) {
		// The run's own clock, not the test's: on a loaded machine a
		// container's start alone can take longer than the limit.
		r := exec1(t, s, code(newEpisode(), "while True: pass", 2))
		if r.Status != schemas.StatusTimeout || r.DurationMS > 15_000 {
			t.Fatalf("loop: %+v", r)
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
		if r.StdoutBytes <= int64(limit) {
			t.Fatalf("stdout_bytes %d: want the size written (over the %d-byte cap)", r.StdoutBytes, limit)
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
	t.Run("kernel attack surface (seccomp)", func(t *testing.T) {
		src, want, err := seccompProbes()
		if err != nil {
			t.Fatal(err)
		}
		r := exec1(t, s, code(newEpisode(), src, 30))
		if r.Status != schemas.StatusOK {
			t.Fatalf("probe run: %+v", r)
		}
		for _, name := range want {
			if name == "ia32" && strings.Contains(r.Stdout, "ia32 unavailable") {
				t.Log("the i386 call killed the probe: no i386 ABI here, or a filter that kills foreign ABIs (docker)")
				continue
			}
			if !strings.Contains(r.Stdout, "DENIED "+name+" ") {
				t.Errorf("%s not denied by the filter", name)
			}
		}
		if !strings.Contains(r.Stdout, "ALLOWED personality-query\n") {
			t.Errorf("personality query refused")
		}
		if t.Failed() {
			t.Logf("probe output:\n%s", r.Stdout)
		}
		healthy(t)
	})
	t.Run("fork server out of reach", func(t *testing.T) {
		if s.cfg.Backend == BackendBwrap && s.cfg.Warm == 0 {
			t.Skip("cold runs have no fork server")
		}
		// The run's parent is the fork server every later run of the
		// episode forks from; for docker, pid 1 outlives every run too.
		// Code must not be able to write their memory or trace them.
		src := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, pid in (("server", os.getppid()), ("init", 1)):
    try:
        os.close(os.open("/proc/%d/mem" % pid, os.O_RDWR)); print(name, "mem OPENED")
    except OSError as e:
        print(name, "mem denied", e.errno)
    r = libc.ptrace(0x4206, pid, 0, 0)  # PTRACE_SEIZE: does not stop it
    print(name, "ptrace", "ATTACHED" if r == 0 else "denied")
print("own", len(os.listdir("/proc/self/fd")) > 0, open("/proc/self/status").read().startswith("Name:"))
`
		ep := newEpisode()
		r := exec1(t, s, code(ep, src, 20))
		if r.Status != schemas.StatusOK || !strings.Contains(r.Stdout, "own True True") {
			t.Fatalf("probe: %+v", r)
		}
		// The warm server is the sandbox's init (bwrap --as-pid-1), and
		// docker's pid 1 is boot.py: either way pid 1 outlives the runs.
		bad := []string{"server mem OPENED", "server ptrace ATTACHED", "init mem OPENED", "init ptrace ATTACHED"}
		for _, b := range bad {
			if strings.Contains(r.Stdout, b) {
				t.Fatalf("%s:\n%s", b, r.Stdout)
			}
		}
		if r := exec1(t, s, code(ep, "print('next turn')", 20)); strings.TrimSpace(r.Stdout) != "next turn" {
			t.Fatalf("next turn: %+v", r)
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

// seccompProbes is Python that makes syscalls the seccomp filter denies,
// each with arguments that give a different result (success, ENOENT,
// EINVAL, EBADF...) when it is missing, and prints "DENIED <name>" for
// each that fails with the filter's errno; want lists the names. The
// numbers come from the filter library's table for this architecture.
func seccompProbes() (src string, want []string, err error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return "", nil, err
	}
	nr := func(name string) int { return info.SyscallNames[name] }
	var b strings.Builder
	fmt.Fprintf(&b, `import ctypes, errno, mmap, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def probe(name, want, nr, *args):
    # In a child: a call the filter lets through must not change the rest.
    pid = os.fork()
    if pid == 0:
        ctypes.set_errno(0)
        r = libc.syscall(nr, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
        e = ctypes.get_errno()
        if r == 0 and name == "clone-newuser":
            os._exit(0)  # the child of a clone that was let through
        print("DENIED" if r == -1 and e == want else "ALLOWED", name, r, errno.errorcode.get(e, e), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
EPERM, ENOSYS = errno.EPERM, errno.ENOSYS
probe("ptrace", EPERM, %d, 0, 0, 0, 0)  # PTRACE_TRACEME
probe("unshare", EPERM, %d, 0x10000000)  # CLONE_NEWUSER
probe("setns", EPERM, %d, -1, 0)
probe("mount", EPERM, %d, b"none", b"/nonexistent-medgym", b"tmpfs", 0, None)
probe("keyctl", EPERM, %d, 0, -3, 0)  # KEYCTL_GET_KEYRING_ID of the session keyring
probe("bpf", EPERM, %d, 0xffff, None, 0)
probe("perf_event_open", EPERM, %d, None, 0, -1, -1, 0)
probe("userfaultfd", EPERM, %d, 1)  # UFFD_USER_MODE_ONLY
probe("io_uring_setup", EPERM, %d, 1, None)
probe("clone-newuser", EPERM, %d, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER|SIGCHLD
probe("clone3", ENOSYS, %d, None, 0)
probe("personality", EPERM, %d, 0x0040000)  # ADDR_NO_RANDOMIZE
r = libc.syscall(%d, ctypes.c_long(0xffffffff))
print("ALLOWED personality-query" if r >= 0 else "DENIED personality-query", flush=True)
`, nr("ptrace"), nr("unshare"), nr("setns"), nr("mount"), nr("keyctl"), nr("bpf"), nr("perf_event_open"),
		nr("userfaultfd"), nr("io_uring_setup"), nr("clone"), nr("clone3"), nr("personality"), nr("personality"))
	want = []string{"ptrace", "unshare", "setns", "mount", "keyctl", "bpf", "perf_event_open", "userfaultfd",
		"io_uring_setup", "clone-newuser", "clone3", "personality"}
	if info.ID == arch.X86_64.ID {
		// getpid through the i386 ABI (int 0x80, eax=20), in a child in
		// case the kernel has no i386 ABI and the int faults.
		b.WriteString(`pid = os.fork()
if pid == 0:
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")  # mov eax, 20; int 0x80; ret
    f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
    r = f()
    print("DENIED ia32" if r == -errno.EPERM else "ALLOWED ia32", r, flush=True)
    os._exit(0)
_, st = os.waitpid(pid, 0)
if os.WIFSIGNALED(st):
    print("ia32 unavailable", flush=True)
`)
		want = append(want, "ia32")
	}
	return b.String(), want, nil
}

// canaryLibrary builds a task library with a unique canary string in every
// verifier-only file (task files and the verifier manifest) and agent data
// without it. It returns the library root and the canary.
func canaryLibrary(t *testing.T) (lib, canary string) {
	t.Helper()
	canary = fmt.Sprintf("MEDGYM-CANARY-%d-%d", os.Getpid(), time.Now().UnixNano())
	lib = openTempDir(t)
	files := map[string]string{
		"agent/toy/t.csv":                          "a,b\n1,x\n2,y\n",
		"agent/toy/notes.txt":                      "patient notes\n",
		"agent/" + schemas.AgentManifestFile:       `{"tree": "agent"}`,
		"verifier/toy/test.jsonl":                  `{"truth": {"answer": "` + canary + `"}, "reference": "print('` + canary + `')"}` + "\n",
		"verifier/toy/train.jsonl":                 `{"truth": {"answer": "` + canary + `"}}` + "\n",
		"verifier/" + schemas.VerifierManifestFile: `{"tree": "verifier", "note": "` + canary + `"}`,
		"upstream/mimic_iii/valid_tasks.jsonl":     `{"answer": ["` + canary + `"]}` + "\n",
		"upstream/mimic_iii/PATIENTS.csv":          "subject_id\n1\n",
	}
	for p, c := range files {
		full := filepath.Join(lib, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return lib, canary
}

// canarySearch is a shell search for the canary over a tree: grep -r,
// reading every file it can. The canary is split in the command, so the
// command's own text (in /proc, or a script file) never matches.
func canarySearch(canary, root string) string {
	head, tail := canary[:len(canary)/2], canary[len(canary)/2:]
	return fmt.Sprintf(`H=%q; T=%q; grep -rlsaF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e "$H$T" %s; echo "grep-exit=$?"`, head, tail, root)
}

// sandboxSearch is canarySearch over a sandbox's whole file tree but /proc,
// /sys, /dev and /usr, and the top-level links (/bin, /lib: into /usr). It
// prints the tops it searched. /usr is the host's (bwrap) or the image's
// (Docker) system tree, mounted read-only; TestCanary proves from the
// sandbox's mount table that no mount, /usr included, reaches the verifier
// tree, so the content search covers what the sandbox adds: /data, the
// workspace, /tmp, /etc and the boot files. Reading all of /usr as well
// (gigabytes on a machine with several toolchains) outran the two-minute
// action limit under load and proved nothing the mount table does not.
func sandboxSearch(canary string) string {
	head, tail := canary[:len(canary)/2], canary[len(canary)/2:]
	return fmt.Sprintf(`H=%q; T=%q; set --
for d in /* /.[!.]*; do
  case "$d" in /proc|/sys|/dev|/usr) continue ;; esac
  if [ -e "$d" ] && [ ! -L "$d" ]; then set -- "$@" "$d"; fi
done
echo "searched: $*"
grep -rlsaF -e "$H$T" "$@"; echo "grep-exit=$?"`, head, tail)
}

// mountsReaching returns the mount points in mountinfo (a sandbox's
// /proc/self/mountinfo) whose source holds the host path target: a mount of
// target's filesystem whose root is target or one of its parents. Host and
// sandbox share the kernel, so device numbers and roots compare directly.
func mountsReaching(t *testing.T, mountinfo, target string) []string {
	t.Helper()
	dev, rel := hostMount(t, target)
	var out []string
	for _, m := range parseMountinfo(t, mountinfo) {
		if m.dev == dev && (m.root == "/" || rel == m.root || strings.HasPrefix(rel, m.root+"/")) {
			out = append(out, m.point)
		}
	}
	return out
}

type mountEntry struct{ dev, root, point, opts string }

// parseMountinfo reads proc(5) mountinfo lines: ID, parent, major:minor,
// root, mount point, options, ... (octal escapes are left as they are:
// the test's paths have none).
func parseMountinfo(t *testing.T, s string) []mountEntry {
	t.Helper()
	var out []mountEntry
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("not a mountinfo line: %q", line)
		}
		out = append(out, mountEntry{dev: f[2], root: f[3], point: f[4], opts: f[5]})
	}
	if len(out) == 0 {
		t.Fatal("empty mountinfo")
	}
	return out
}

// hostMount finds the mount holding path in this process's mount table and
// returns its device and path's place in that filesystem.
func hostMount(t *testing.T, path string) (dev, rel string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	path, err = filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	best := ""
	for _, m := range parseMountinfo(t, string(b)) {
		if (path == m.point || m.point == "/" || strings.HasPrefix(path, m.point+"/")) && len(m.point) >= len(best) {
			best, dev = m.point, m.dev
			rel = filepath.Join(m.root, strings.TrimPrefix(path, m.point))
		}
	}
	return dev, rel
}

// TestCanary is issue 13's reward-integrity check: the answer key (every
// verifier-only file, each holding a canary) is unreadable from inside the
// sandbox on every backend and through every action that returns data
// (validate_code, terminal, request_info), while the same search over the
// host's verifier tree finds it (the positive control). A data root that
// holds verifier-only files is refused at start.
func TestCanary(t *testing.T) {
	t.Parallel()
	lib, canary := canaryLibrary(t)
	agent, verifier := filepath.Join(lib, "agent"), filepath.Join(lib, "verifier")

	// Positive control: the search finds the canary in the host's verifier
	// tree (so it can fail), and not in the agent tree.
	hostSearch := func(root string) string {
		out, _ := exec.Command("sh", "-c", canarySearch(canary, root)).CombinedOutput()
		return string(out)
	}
	if out := hostSearch(verifier); !strings.Contains(out, "test.jsonl") || !strings.Contains(out, "train.jsonl") ||
		!strings.Contains(out, schemas.VerifierManifestFile) || !strings.Contains(out, "grep-exit=0") {
		t.Fatalf("positive control: the search missed the canary in the verifier tree:\n%s", out)
	}
	if out := strings.TrimSpace(hostSearch(agent)); out != "grep-exit=1" {
		t.Fatalf("the agent tree holds the canary:\n%s", out)
	}

	t.Run("refused data roots", func(t *testing.T) {
		for _, backend := range []string{BackendBwrap, BackendDocker} {
			for _, root := range []string{lib, verifier, filepath.Join(lib, "upstream")} {
				cfg := Config{Backend: backend, DataRoot: root, WorkRoot: filepath.Join(openTempDir(t), "work")}
				s, err := New(t.Context(), cfg, testLogger(t))
				if err == nil {
					_ = s.Close()
					t.Fatalf("%s: data root %s with verifier-only files was accepted", backend, root)
				}
				if !errors.Is(err, errVerifierData) || !strings.Contains(err.Error(), "agent tree") {
					t.Fatalf("%s: data root %s: unclear error %v", backend, root, err)
				}
			}
		}
	})

	// Every path back to the agent, searched from inside the sandbox.
	pySearch := fmt.Sprintf(`import os
canary = (%q + %q).encode()
hits, read = [], 0
for top, dirs, files in os.walk("/"):
    if top == "/":  # as sandboxSearch: /usr is covered by the mount check
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "usr")]
    for f in files:
        p = os.path.join(top, f)
        try:
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            with open(p, "rb") as fh:
                b = fh.read(64 << 20)
            read += 1
            if canary in b:
                hits.append(p)
        except Exception:
            pass
print("read", read, "files; hits:", hits)
print("data:", sorted(os.listdir("/data")), sorted(os.listdir("/data/toy")))
`, canary[:len(canary)/2], canary[len(canary)/2:])
	for name, mk := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // backends are independent
			s := mk(t, Config{DataRoot: agent})
			withData := func(r schemas.ActionRequest) schemas.ActionRequest {
				r.Resources = []string{"toy"}
				r.TimeoutSec = 120
				return r
			}
			ep := newEpisode()
			// No mount reaches the verifier tree; the positive control: the
			// /data mount reaches the agent tree, so the check can fail.
			r := exec1(t, s, withData(term(ep, "cat /proc/self/mountinfo", 30)))
			if r.Status != schemas.StatusOK {
				t.Fatalf("terminal: reading the mount table: %s %q", r.Status, r.Message)
			}
			if got := mountsReaching(t, r.Stdout, filepath.Join(agent, "toy")); !slices.Contains(got, "/data/toy") && !slices.Contains(got, "/data") {
				t.Fatalf("positive control: no mount in the sandbox reaches the agent data (got %v):\n%s", got, r.Stdout)
			}
			if got := mountsReaching(t, r.Stdout, verifier); len(got) > 0 {
				t.Fatalf("sandbox mounts %v reach the verifier tree:\n%s", got, r.Stdout)
			}
			for _, m := range parseMountinfo(t, r.Stdout) {
				if m.point == "/usr" && !slices.Contains(strings.Split(m.opts, ","), "ro") {
					t.Fatalf("/usr is writable in the sandbox: %+v", m)
				}
			}
			r = exec1(t, s, withData(term(ep, sandboxSearch(canary), 120)))
			// grep lists every file holding the canary; exit 1 (none) or 2
			// (none, and some files were unreadable) are what pass.
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			if strings.Contains(r.Message, canary) || len(lines) != 2 || (lines[1] != "grep-exit=1" && lines[1] != "grep-exit=2") {
				t.Fatalf("terminal: grep -r found the canary or failed: %s %q", r.Status, r.Message)
			}
			for _, top := range []string{"/data", WorkDir, "/tmp", "/etc"} {
				if !slices.Contains(strings.Fields(strings.TrimPrefix(lines[0], "searched:")), top) {
					t.Fatalf("terminal: the search skipped %s: %q", top, lines[0])
				}
			}
			r = exec1(t, s, withData(code(ep, pySearch, 120)))
			if strings.Contains(r.Message, canary) || !strings.Contains(r.Stdout, "hits: []") {
				t.Fatalf("validate_code: reading every file found the canary: %s %q", r.Status, r.Message)
			}
			// The search did see the task's data (the mount worked), and
			// nothing of the verifier tree.
			if !strings.Contains(r.Stdout, "data: ['toy'] ['notes.txt', 't.csv']") {
				t.Fatalf("validate_code: the agent data is not what was mounted: %q", r.Stdout)
			}
			info := func(dataPath, infoType, key string) schemas.ExecResult {
				p, _ := json.Marshal(map[string]string{"data_path": dataPath, "info_type": infoType, "keyterm": key})
				return exec1(t, s, withData(req(ep, schemas.Action{Name: schemas.ActionRequestInfo, Params: p}, 30)))
			}
			if r := info("/data/toy/t.csv", "column_names", ""); r.Status != schemas.StatusInfo || !strings.Contains(r.Message, "a") {
				t.Fatalf("request_info on agent data failed (the probes below would prove nothing): %+v", r)
			}
			for _, p := range []string{"/data/toy/../../verifier/toy/test.jsonl", "toy/../verifier/toy/test.jsonl",
				"/data/verifier/toy/test.jsonl", "../verifier/toy/test.jsonl", filepath.Join(verifier, "toy", "test.jsonl"),
				"/data/toy/../../" + schemas.VerifierTreeDir + "/" + schemas.VerifierManifestFile, "/data/../verifier"} {
				for _, it := range []string{"column_names", "column_values", "term"} {
					if r := info(p, it, "answer"); strings.Contains(r.Message, canary) || r.Status == schemas.StatusInfo {
						t.Fatalf("request_info %s %s reached the verifier tree: %+v", p, it, r)
					}
				}
			}
		})
	}
}

// inodeFloodSrc makes empty files, symlinks and empty directories until
// something stops it.
const inodeFloodSrc = `import os
i = 0
try:
    while True:
        open(f'/work/f{i}', 'w').close()
        os.symlink('x', f'/work/l{i}')
        os.mkdir(f'/work/d{i}')
        i += 1
except OSError as e:
    print('made', i, 'of each, then:', e)
    raise
`
