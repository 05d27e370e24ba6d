package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestStaleCgroupsReaped: a process left in the cgroup of a worker that
// died (its pid is gone) is killed and the cgroup removed when a worker
// starts; a live worker's cgroup is left alone.
func TestStaleCgroupsReaped(t *testing.T) {
	cur, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	probe, err := detectCgroups()
	if err != nil {
		if os.Getenv("CI") == "true" && os.Geteuid() == 0 {
			t.Fatalf("cgroup v1 not writable in CI as root: %v", err)
		}
		t.Skipf("cgroup v1 not writable here: %v", err)
	}
	probe.remove()

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
		for _, ctl := range []string{"memory", "pids", "cpu"} {
			d := filepath.Join(cgroupRoot, ctl, cur[ctl], fmt.Sprintf("medgym-%d-7", owner), "run-1")
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, d)
		}
		return dirs
	}
	staleDirs := mk(dead.Process.Pid)
	liveDirs := mk(alive.Process.Pid)
	defer (&cgroupParent{mem: filepath.Dir(liveDirs[0]), pids: filepath.Dir(liveDirs[1]), cpu: filepath.Dir(liveDirs[2])}).remove()
	for _, d := range staleDirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(leftover.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	reapStaleCgroups(cur)
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
