package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

// newDocker builds a docker-backend Sandbox. It runs only when
// MEDGYM_DOCKER=1 (backends() decides); then a missing engine or image is
// a failure in CI and a skip elsewhere.
func newDocker(t testing.TB, cfg Config) *Sandbox {
	t.Helper()
	cfg.Backend = BackendDocker
	if cfg.WorkRoot == "" {
		cfg.WorkRoot = filepath.Join(openTempDir(t), "work")
	}
	if cfg.Limits.WallTimeout == 0 {
		cfg.Limits = testLimits()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := New(ctx, cfg, testLogger(t))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker backend: %v", err)
		}
		t.Skipf("docker backend unavailable (scripts/docker.sh start && scripts/sandbox-image.sh): %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// dockerContainers lists the ids of containers labelled for root.
func dockerContainers(t testing.TB, root string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+labelWorkRoot+"="+root).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

// TestDockerContainers checks the docker backend's container life cycle:
// one labelled container per episode, removed by Release, by Reap for dead
// episodes, and by Close.
func TestDockerContainers(t *testing.T) {
	t.Parallel()
	if os.Getenv("MEDGYM_DOCKER") != "1" {
		t.Skip("MEDGYM_DOCKER != 1")
	}
	root := filepath.Join(openTempDir(t), "work")
	s := newDocker(t, Config{WorkRoot: root})
	a, b, c := newEpisode(), newEpisode(), newEpisode()
	for _, ep := range []string{a, b, c} {
		if r := exec1(t, s, code(ep, "print(1)", 20)); r.Status != schemas.StatusOK {
			t.Fatalf("run: %+v", r)
		}
	}
	if n := len(dockerContainers(t, root)); n != 3 {
		t.Fatalf("%d containers for 3 episodes", n)
	}
	out, err := exec.Command("docker", "inspect", "--format",
		"{{.HostConfig.NetworkMode}} {{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}} {{index .HostConfig.SecurityOpt 0}} {{.Config.User}} {{index .Config.Labels \"medgym.episode\"}}",
		dockerContainers(t, root)[0]).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, "none true [ALL] no-new-privileges 65534:65534 ep-") {
		t.Fatalf("container settings: %s", got)
	}
	sec, err := exec.Command("docker", "inspect", "--format", "{{index .HostConfig.SecurityOpt 1}}", dockerContainers(t, root)[0]).Output()
	if err != nil || !strings.HasPrefix(string(sec), `seccomp={"defaultAction":"SCMP_ACT_ERRNO"`) {
		t.Fatalf("container seccomp option: %.80s %v", sec, err)
	}
	checkCtlDirs(t, root, dockerContainers(t, root))
	if err := s.Release(a); err != nil {
		t.Fatal(err)
	}
	if n := len(dockerContainers(t, root)); n != 2 {
		t.Fatalf("release left %d containers, want 2", n)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, metaDir, "ctl")); len(ents) != 2 {
		t.Fatalf("release left %d control directories, want 2", len(ents))
	}
	if _, err := s.Reap(func(ep string) bool { return ep == b }); err != nil {
		t.Fatal(err)
	}
	if n := len(dockerContainers(t, root)); n != 1 {
		t.Fatalf("reap left %d containers, want 1 (the live episode's)", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(dockerContainers(t, root)); n != 0 {
		t.Fatalf("close left %d containers", n)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, metaDir, "ctl")); len(ents) != 0 {
		t.Fatalf("close left %d control directories", len(ents))
	}
}

// checkCtlDirs checks that each container has its own control directory,
// bound at dockerCtlDir, that only the sandbox user (and root) can enter
// when the worker is root, and that is empty once the worker has connected.
func checkCtlDirs(t *testing.T, root string, ids []string) {
	t.Helper()
	ctlRoot := filepath.Join(root, metaDir, "ctl")
	if st, err := os.Stat(ctlRoot); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("control root: %v %v", st.Mode(), err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		out, err := exec.Command("docker", "inspect", "--format", "{{range .HostConfig.Binds}}{{println .}}{{end}}", id).Output()
		if err != nil {
			t.Fatal(err)
		}
		var dir string
		for _, b := range strings.Fields(string(out)) {
			if host, ok := strings.CutSuffix(b, ":"+dockerCtlDir+":rw"); ok {
				dir = host
			}
		}
		if dir == "" || filepath.Dir(dir) != ctlRoot || seen[dir] {
			t.Fatalf("container %s: control directory %q (binds %q)", id, dir, out)
		}
		seen[dir] = true
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 && (st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != sandboxUID) {
			t.Fatalf("control directory %s: mode %v uid %d", dir, st.Mode(), st.Sys().(*syscall.Stat_t).Uid)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("control directory %s holds %d entries after the dial", dir, len(ents))
		}
	}
}
