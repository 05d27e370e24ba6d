package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// TestContainerCount: a container's OOM kills and pids-limit hits are found
// under each layout the engine leaves on its host: v1 with the cgroupfs
// driver, v2 with the cgroupfs or the systemd driver.
func TestContainerCount(t *testing.T) {
	files := map[string]map[string]string{
		"v1": {
			"memory/docker/c1/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
			"pids/docker/c1/pids.events":          "max 5\n",
		},
		"v2 cgroupfs": {
			"docker/c1/memory.events": "low 0\nhigh 0\nmax 9\noom 3\noom_kill 3\noom_group_kill 0\n",
			"docker/c1/pids.events":   "max 7\n",
		},
		"v2 systemd": {
			"system.slice/docker-c1.scope/memory.events": "low 0\nhigh 0\nmax 1\noom 1\noom_kill 1\n",
			"system.slice/docker-c1.scope/pids.events":   "max 0\n",
		},
	}
	want := map[string][2]int64{"v1": {2, 5}, "v2 cgroupfs": {3, 7}, "v2 systemd": {1, 0}}
	for layout, fs := range files {
		root := t.TempDir()
		for name, body := range fs {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		oom, pids := containerCount(root, "c1", ctrOOMKills), containerCount(root, "c1", ctrPidsMax)
		if got := [2]int64{oom, pids}; got != want[layout] {
			t.Errorf("%s: oom_kill, pids max = %v, want %v", layout, got, want[layout])
		}
		if n := containerCount(root, "other", ctrOOMKills); n != -1 {
			t.Errorf("%s: a container with no cgroup here counts %d, want -1", layout, n)
		}
	}
}
