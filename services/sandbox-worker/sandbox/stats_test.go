package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

// TestStats: Execute's results are counted by status, the limits in force
// are named, and a warm pool counts the episodes it served from a ready
// server and those it did not.
func TestStats(t *testing.T) {
	s := newWith(0)(t, Config{})
	exec1(t, s, code(newEpisode(), "print(1)", 20))
	exec1(t, s, code(newEpisode(), "raise SystemExit(3)", 20))
	exec1(t, s, code(newEpisode(), "print(2)", 20))
	st := s.Stats()
	if st.Actions[schemas.StatusOK] != 2 || st.Actions[schemas.StatusError] != 1 {
		t.Fatalf("actions %v, want 2 ok and 1 error", st.Actions)
	}
	if st.Backend != BackendBwrap || !st.Seccomp || st.Episodes != 3 {
		t.Fatalf("stats %+v", st)
	}
	want := "rlimits"
	if s.cgParent != nil {
		want = "cgroup-" + s.cgParent.version()
	}
	if st.Limits != want {
		t.Fatalf("limits %q, want %q", st.Limits, want)
	}
	if os.Getenv("CI") == "true" && os.Geteuid() == 0 && !strings.HasPrefix(st.Limits, "cgroup-") {
		t.Fatalf("limits %q in CI as root, want cgroups", st.Limits)
	}

	w := newWith(1)(t, Config{})
	deadline := time.Now().Add(2 * time.Minute)
	for w.Stats().PoolReady < 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if w.Stats().PoolReady != 1 {
		t.Fatalf("no warm server ready after 2 minutes: %+v", w.Stats())
	}
	exec1(t, w, code(newEpisode(), "print(1)", 20))
	if st := w.Stats(); st.PoolHits != 1 || st.PoolMisses != 0 {
		t.Fatalf("first episode with a server ready: %+v", st)
	}
	exec1(t, w, code(newEpisode(), "print(1)", 20)) // the pool refills in the background
	if st := w.Stats(); st.PoolHits+st.PoolMisses != 2 {
		t.Fatalf("two new episodes, pool counted %d", st.PoolHits+st.PoolMisses)
	}
}

// TestRequireCgroups: a worker that cannot create cgroups (here: one
// running as an unprivileged user) refuses to start when RequireCgroups is
// set, saying why, and otherwise runs on rlimits and says so in Stats. The
// test binary runs itself as uid 65534 for that.
func TestRequireCgroups(t *testing.T) {
	if os.Getenv("MEDGYM_REQUIRE_CGROUPS_CHILD") == "1" {
		requireCgroupsChild(t)
		return
	}
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a worker as another user")
	}
	dir := openTempDir(t)
	bin := filepath.Join(dir, "sandbox.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, sandboxUID, sandboxUID); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^TestRequireCgroups$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "MEDGYM_REQUIRE_CGROUPS_CHILD=1", "TMPDIR=" + tmp, "CI=" + os.Getenv("CI")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: sandboxUID, Gid: sandboxUID, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", sandboxUID, out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRequireCgroups") {
		t.Fatalf("the unprivileged worker's test failed: %v", err)
	}
}

func requireCgroupsChild(t *testing.T) {
	if _, err := detectCgroups(); err == nil {
		t.Skip("this user can create cgroups here")
	}
	work := filepath.Join(openTempDir(t), "work")
	_, err := New(t.Context(), Config{WorkRoot: work, RequireCgroups: true, Limits: testLimits()}, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "cgroup limits are required") {
		t.Fatalf("New with RequireCgroups and no cgroups: err = %v", err)
	}
	t.Logf("refused: %v", err)
	s := newWith(0)(t, Config{WorkRoot: work})
	if st := s.Stats(); st.Limits != "rlimits" {
		t.Fatalf("without cgroups, limits %q, want rlimits", st.Limits)
	}
	if r := exec1(t, s, code(newEpisode(), "print('ok')", 20)); r.Status != schemas.StatusOK {
		t.Fatalf("run on rlimits: %+v", r)
	}
}
