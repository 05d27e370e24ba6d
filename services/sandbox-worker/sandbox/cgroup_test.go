package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStaleCgroupsReaped: a process left in the cgroup of a worker that
// died (its pid is gone) is killed and the cgroup removed when a worker
// starts; a live worker's cgroup is left alone.
func TestStaleCgroupsReaped(t *testing.T) {
	cur, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	probe := requireCgroups(t)
	// The directories the worker's cgroups sit in: one per v1 controller,
	// or the one v2 cgroup.
	var roots []string
	for _, d := range probe.dirs() {
		roots = append(roots, filepath.Dir(d))
	}
	reap := func() {
		if probe.v2 != "" {
			reapStaleV2(roots[0])
		} else {
			reapStaleCgroups(cur)
		}
	}

	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	alive := exec.Command("/bin/sleep", "60")
	if err := alive.Start(); err != nil {
		t.Fatal(err)
	}
	defer alive.Process.Kill()
	leftover := exec.Command("/bin/sleep", "60")
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	defer leftover.Process.Kill()
	exited := make(chan error, 1)
	go func() { exited <- leftover.Wait() }()

	mk := func(owner int) []string {
		var dirs []string
		for _, r := range roots {
			d := filepath.Join(r, fmt.Sprintf("medgym-%d-7", owner), "run-1")
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, d)
		}
		return dirs
	}
	staleDirs := mk(dead.Process.Pid)
	liveDirs := mk(alive.Process.Pid)
	defer func() {
		for _, d := range liveDirs {
			// One directory per parent: on v1 each controller's; remove
			// empties and deletes it whichever field names it.
			live := &cgroupParent{mem: filepath.Dir(d)}
			if probe.v2 != "" {
				live = &cgroupParent{v2: filepath.Dir(d)}
			}
			live.remove()
		}
	}()
	for _, d := range staleDirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(leftover.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	reap()
	if err := <-exited; err == nil {
		t.Fatal("the process in the dead worker's cgroup exited by itself?")
	}
	for _, d := range staleDirs {
		if _, err := os.Stat(filepath.Dir(d)); !os.IsNotExist(err) {
			t.Fatalf("stale cgroup %s not removed: %v", filepath.Dir(d), err)
		}
	}
	for _, d := range liveDirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("a live worker's cgroup was removed: %v", err)
		}
	}
}

// requireCgroups returns the worker's cgroups: v1 or v2, whichever this
// host has. A root CI run must have them; elsewhere the test skips.
func requireCgroups(t *testing.T) *cgroupParent {
	t.Helper()
	p, err := detectCgroups()
	if err != nil {
		if os.Getenv("CI") == "true" && os.Geteuid() == 0 {
			t.Fatalf("cgroups not writable in CI as root: %v", err)
		}
		t.Skipf("cgroups not writable here: %v", err)
	}
	t.Cleanup(p.remove)
	t.Logf("cgroup %s: %v", p.version(), p.dirs())
	if want := os.Getenv("MEDGYM_CGROUP"); want != "" && p.version() != want {
		t.Fatalf("cgroup %s in use, MEDGYM_CGROUP wants %s", p.version(), want)
	}
	return p
}

// TestCgroupV2Delegation: on a v2 host, in a delegated cgroup that holds
// processes (a systemd service's), the worker moves them to a leaf of
// their own, enables memory, pids and cpu for its children, and each run's
// cgroup gets the limits.
func TestCgroupV2Delegation(t *testing.T) {
	p := requireCgroups(t)
	if p.v2 == "" {
		t.Skip("cgroup v1 host (scripts/cgroup2-vm.sh runs this on v2)")
	}
	cur, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	svc := filepath.Dir(p.v2)
	if got, want := filepath.Join(cgroupRoot, cur[""]), filepath.Join(svc, workerLeaf(os.Getpid())); got != want && svc != cgroupRoot {
		t.Fatalf("the worker is in %s, want its leaf %s", got, want)
	}
	for _, d := range []string{svc, p.v2} {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range v2Controllers {
			if !strings.Contains(string(b), c) {
				t.Fatalf("%s/cgroup.subtree_control = %q: %s not enabled", d, b, c)
			}
		}
	}
	lim := DefaultLimits()
	cg, err := p.create("limits", lim, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.destroy()
	for file, want := range map[string]string{
		"memory.max": strconv.FormatInt(lim.MemoryBytes+1<<20, 10),
		"pids.max":   strconv.Itoa(lim.Pids),
		"cpu.max":    fmt.Sprintf("%d 100000", int(lim.CPUs*100000)),
	} {
		b, err := os.ReadFile(filepath.Join(cg.dirs[0], file))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	for shares, weight := range map[int]string{16: "1", 1024: "100"} {
		cg.setShares(shares)
		if b, _ := os.ReadFile(filepath.Join(cg.dirs[0], "cpu.weight")); strings.TrimSpace(string(b)) != weight {
			t.Errorf("setShares(%d): cpu.weight = %q, want %s", shares, b, weight)
		}
	}
	// A second sandbox of the same process finds the controllers enabled
	// and itself already in its leaf.
	q, err := detectCgroups()
	if err != nil {
		t.Fatalf("second sandbox: %v", err)
	}
	defer q.remove()
	if filepath.Dir(q.v2) != svc {
		t.Fatalf("second sandbox's cgroup %s is not beside the first's (%s)", q.v2, p.v2)
	}
}

// gated starts `sh -c script` stopped on its stdin, puts it in cg, then
// lets it go, so that everything it does is charged to cg.
func gated(t *testing.T, cg *cgroup, script string) (*exec.Cmd, func()) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read go; "+script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if err := cg.join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return cmd, func() {
		if _, err := in.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCgroupLimits: the limits a sandbox's cgroup gets are the kernel's to
// enforce, on v1 and v2 alike: memory (including shared memory, which the
// data rlimit does not count) ends in an OOM kill that oomKilled reports,
// with the peak near the limit; pids.max stops forks and pidsHit says so;
// the CPU quota throttles a busy loop; killAll leaves nothing behind.
func TestCgroupLimits(t *testing.T) {
	p := requireCgroups(t)
	lim := DefaultLimits()
	lim.MemoryBytes = 64 << 20
	lim.Pids = 8
	lim.CPUs = 0.2
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 missing")
	}

	t.Run("memory", func(t *testing.T) {
		cg, err := p.create("mem", lim, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.destroy()
		// mmap(-1, n) is MAP_SHARED: RLIMIT_DATA does not count it.
		cmd, release := gated(t, cg, "exec "+python+" -c 'import mmap; m = mmap.mmap(-1, 512 << 20); m.write(bytes(512 << 20)); print(\"survived\")'")
		release()
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("a 512 MiB shared mapping in a 64 MiB cgroup ended with %v, want SIGKILL", err)
		}
		if !cg.oomKilled() {
			t.Fatal("oomKilled() = false after an OOM kill")
		}
		if pk := cg.peak(); cg.v2 && (pk < 32<<20 || pk > 72<<20) || !cg.v2 && pk == 0 {
			t.Fatalf("peak %d MiB, want close to the 64 MiB limit", pk>>20)
		}
	})

	t.Run("pids", func(t *testing.T) {
		cg, err := p.create("pids", lim, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.destroy()
		cmd, release := gated(t, cg, "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do sleep 30 & done; wait")
		if cg.pidsHit() {
			t.Fatal("pidsHit() before any fork")
		}
		release()
		deadline := time.Now().Add(20 * time.Second)
		for !cg.pidsHit() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !cg.pidsHit() {
			t.Fatal("16 sleeps under pids.max 8: pidsHit() stayed false")
		}
		if n := countProcs(t, cg); n > lim.Pids {
			t.Fatalf("%d processes in a cgroup with pids.max %d", n, lim.Pids)
		}
		cg.killAll()
		if n := countProcs(t, cg); n != 0 {
			t.Fatalf("%d processes left after killAll", n)
		}
		_ = cmd.Wait()
	})

	t.Run("cpu", func(t *testing.T) {
		cg, err := p.create("cpu", lim, 0)
		if err != nil {
			t.Fatal(err)
		}
		cmd, release := gated(t, cg, "exec "+python+" -c 'while True: pass'")
		release()
		deadline := time.Now().Add(20 * time.Second)
		for readKey(filepath.Join(cg.cpu, "cpu.stat"), "nr_throttled") == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if readKey(filepath.Join(cg.cpu, "cpu.stat"), "nr_throttled") == 0 {
			t.Fatal("a busy loop under a 0.2 CPU quota was never throttled")
		}
		dir := cg.dirs[0]
		cg.destroy()
		if err := cmd.Wait(); err == nil {
			t.Fatal("busy loop survived destroy")
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("cgroup %s still there after destroy: %v", dir, err)
		}
	})
}

func countProcs(t *testing.T, cg *cgroup) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg.pids, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(b)))
}

// TestVacate: on v2 the worker moves itself and its own children out of
// its cgroup, but never a process that is not its own (a login shell that
// shares a session scope): it then refuses, naming the process.
func TestVacate(t *testing.T) {
	p := requireCgroups(t)
	if p.v2 == "" {
		t.Skip("cgroup v1 host (scripts/cgroup2-vm.sh runs this on v2)")
	}
	svc := filepath.Dir(p.v2)
	mk := func(name string) string {
		d := filepath.Join(svc, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			(&cgroupParent{v2: d}).remove()
			(&cgroup{dirs: []string{d}, v2: true}).destroy()
		})
		return d
	}
	put := func(dir string, pid int) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Our own child moves with us.
	own := mk("vacate-own")
	child := exec.Command("/bin/sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	put(own, child.Process.Pid)
	if err := vacate(own); err != nil {
		t.Fatalf("vacate with only our child: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(own, workerLeaf(os.Getpid()), "cgroup.procs"))
	if strings.TrimSpace(string(b)) != strconv.Itoa(child.Process.Pid) {
		t.Fatalf("leaf holds %q, want our child %d", b, child.Process.Pid)
	}

	// An orphan (reparented away from us) is not ours to move.
	foreign := mk("vacate-foreign")
	out, err := exec.Command("/bin/sh", "-c", "/bin/sleep 60 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	defer syscall.Kill(orphan, syscall.SIGKILL)
	put(foreign, orphan)
	b, _ = os.ReadFile(filepath.Join(foreign, "cgroup.procs"))
	t.Logf("orphan %d, parent %d, %s holds %q", orphan, parentPid(orphan), foreign, b)
	err = vacate(foreign)
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(orphan)) {
		t.Fatalf("vacate with a foreign process: err = %v, want a refusal naming %d", err, orphan)
	}
	b, _ = os.ReadFile(filepath.Join(foreign, "cgroup.procs"))
	if strings.TrimSpace(string(b)) != strconv.Itoa(orphan) {
		t.Fatalf("the foreign process was moved: %s holds %q", foreign, b)
	}
}
