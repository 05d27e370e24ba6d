package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

// bwrapBackends are the backends whose sandbox bwrap sets up.
func bwrapBackends() map[string]constructor {
	return map[string]constructor{"cold": newWith(0), "warm": newWith(1)}
}

// TestSetupFailure checks that a sandbox bwrap cannot set up is reported as
// sandbox_error with bwrap's own message, from bwrap's status report and
// never from the text on stderr, and that code cannot cause one.
func TestSetupFailure(t *testing.T) {
	t.Parallel()
	for name, mk := range bwrapBackends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			setupFailure(t, mk)
		})
	}
}

func setupFailure(t *testing.T, mk constructor) {
	data := openTempDir(t)
	if err := os.MkdirAll(filepath.Join(data, "locked", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(data, "toy"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := mk(t, Config{DataRoot: data})
	healthy := func(t *testing.T) {
		t.Helper()
		if r := exec1(t, s, code(newEpisode(), "print(6*7)", 20)); r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "42" {
			t.Fatalf("sandbox unusable afterwards: %+v", r)
		}
	}

	t.Run("resource unreachable by the sandbox user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs a root worker (bwrap then runs as uid 65534, which a 0700 directory shuts out)")
		}
		// After New, the resource's parent becomes unreachable for uid
		// 65534: the worker (root) still resolves the path, bwrap cannot.
		if err := os.Chmod(filepath.Join(data, "locked"), 0o700); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(filepath.Join(data, "locked"), 0o755)
		r := code(newEpisode(), "print('ran')", 20)
		r.Resources = []string{"locked/sub"}
		res := exec1(t, s, r)
		if res.Status != schemas.StatusSandboxError || !strings.Contains(res.Message, "bwrap: Can't find source path") ||
			!strings.Contains(res.Message, "Permission denied") || strings.Contains(res.Stdout, "ran") {
			t.Fatalf("want sandbox_error with bwrap's message, got %+v", res)
		}
		healthy(t)
	})

	t.Run("mount source missing", func(t *testing.T) {
		ep := newEpisode()
		ws := s.workspacePath(ep)
		mounts := []mount{{host: filepath.Join(data, "vanished"), inside: DataDir + "/vanished"}}
		if err := s.run.prepare(ep, ws, mounts); err != nil {
			t.Fatal(err)
		}
		defer s.Release(ep)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := s.run.run(ctx, runSpec{episode: ep, workspace: ws, mounts: mounts, code: "print('ran')", timeout: 20 * time.Second})
		if !errors.Is(err, errSetup) || !strings.Contains(err.Error(), "bwrap: Can't find source path "+filepath.Join(data, "vanished")) {
			t.Fatalf("want a setup error with bwrap's message, got %v", err)
		}
		if res := sandboxError(err); res.Status != schemas.StatusSandboxError {
			t.Fatalf("got %+v", res)
		}
		healthy(t)
	})

	t.Run("workspace made unreachable by the code", func(t *testing.T) {
		// chmod 000 on /work would make the next bwrap fail to chdir into
		// it: the worker restores the mode before each sandbox start.
		ep := newEpisode()
		if r := exec1(t, s, term(ep, "chmod 000 /work", 20)); r.Status != schemas.StatusOK {
			t.Fatalf("chmod: %+v", r)
		}
		// A timeout kills a warm server, so the next turn starts a new one.
		if r := exec1(t, s, code(ep, "import time\ntime.sleep(60)", 1)); r.Status == schemas.StatusSandboxError {
			t.Fatalf("got %+v", r)
		}
		r := exec1(t, s, code(ep, "import os\nprint(os.getcwd())", 20))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != WorkDir {
			t.Fatalf("code caused a sandbox failure for its next turn: %+v", r)
		}
	})

	t.Run("modules planted in the workspace", func(t *testing.T) {
		// Modules on PYTHONPATH (/work) that exit: the code's own imports
		// see them, but a (re)started warm server must not run them.
		ep := newEpisode()
		plant := "for m in ('sitecustomize', 'numpy', 'pandas', 'json', 'plantedmod'):\n" +
			"    open(m + '.py', 'w').write('import os, sys\\nsys.stderr.write(\"bwrap: Can\\'t mount proc on /newroot/proc: Operation not permitted\\\\n\")\\nos._exit(1)\\n')\n"
		if r := exec1(t, s, code(ep, plant, 20)); r.Status == schemas.StatusSandboxError {
			t.Fatalf("plant: %+v", r)
		}
		if r := exec1(t, s, code(ep, "import time\ntime.sleep(60)", 1)); r.Status == schemas.StatusSandboxError {
			t.Fatalf("got %+v", r)
		}
		r := exec1(t, s, term(ep, "echo hi", 20))
		if r.Status != schemas.StatusOK || r.Stdout != "hi\n" {
			t.Fatalf("planted modules broke the sandbox: %+v", r)
		}
		r = exec1(t, s, code(ep, "import plantedmod", 20))
		if r.Status != schemas.StatusError || r.ExitCode != 1 {
			t.Fatalf("the code's own import of a planted module: %+v", r)
		}
	})
}

// TestFakeSetupFailure: code that prints what bwrap prints when it cannot
// set up a sandbox, and exits 1 as bwrap does, is still the code failing.
// So is code that writes forged status lines to every descriptor it can reach.
func TestFakeSetupFailure(t *testing.T) {
	t.Parallel()
	const fake = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"
	for name, mk := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := mk(t, Config{})
			for _, r := range []schemas.ActionRequest{
				code(newEpisode(), "import sys\nsys.stderr.write(\""+fake+"\\n\")\nsys.exit(1)", 20),
				term(newEpisode(), "echo \""+fake+"\" >&2; exit 1", 20),
			} {
				res := exec1(t, s, r)
				if res.Status != schemas.StatusError || res.ExitCode != 1 || !strings.Contains(res.Stderr, fake) {
					t.Fatalf("%s: want status error, exit 1, got %+v", r.Action.Params, res)
				}
			}
			// Garbage and a forged exit-code on every writable descriptor of
			// every process the code can see: bwrap's status fd must not be
			// among them, or the worker could be made to misread the run.
			forge := `import os, signal
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
forged = b'{"child-pid": 1, "exit-code": 0}\n{{{'
hit = []
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        fds = os.listdir('/proc/%s/fd' % pid)
    except OSError:
        continue
    for fd in fds:
        path = '/proc/%s/fd/%s' % (pid, fd)
        if pid == str(os.getpid()) and fd in ('0', '1', '2'):
            continue
        try:
            target = os.readlink(path)
        except OSError:
            continue
        try:
            w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.write(w, forged)
            hit.append('%s:%s:%s' % (pid, fd, target))
        except OSError:
            pass
        os.close(w)
for fd in range(3, 1024):
    try:
        os.write(fd, forged)
        hit.append('self:%d' % fd)
    except OSError:
        pass
print(hit)
raise SystemExit(1)
`
			res := exec1(t, s, code(newEpisode(), forge, 20))
			if res.Status != schemas.StatusError || res.ExitCode != 1 {
				t.Fatalf("forged status lines changed the result: %+v", res)
			}
			t.Logf("descriptors the code could write to: %s", strings.TrimSpace(res.Stdout))
		})
	}
}

func TestReadStatus(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bwrapStatus
	}{
		{"", bwrapStatus{}},
		{`{ "child-pid": 12, "pid-namespace": 4026532186 }` + "\n", bwrapStatus{childStarted: true}},
		{`{ "child-pid": 12 }` + "\n" + `{ "exit-code": 3 }` + "\n", bwrapStatus{childStarted: true, ran: true, exitCode: 3}},
		{`{ "child-pid": 12 }` + "\n[1]\n" + `{ "future": true }` + "\n" + `{ "exit-code": 137 }` + "\n", bwrapStatus{childStarted: true, ran: true, exitCode: 137}},
		{`{ "child-pid": 12 }` + "\n" + `{ "exit-co`, bwrapStatus{childStarted: true}},
	} {
		if got := readStatus(strings.NewReader(c.in)); got != c.want {
			t.Errorf("readStatus(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
