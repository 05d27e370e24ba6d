package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// cgroupRoot is the v1 hierarchy mount point.
const cgroupRoot = "/sys/fs/cgroup"

// parentSeq tells apart several sandboxes of one process.
var parentSeq atomic.Int64

// cgroupParent holds this worker's own v1 cgroups (memory, pids, cpu),
// created under the cgroups the worker already sits in (never moving the
// worker itself).
type cgroupParent struct {
	mem, pids, cpu string
}

// detectCgroups creates <current>/medgym-<pid> under the memory, pids and
// cpu v1 hierarchies. It fails when any of them is missing or not writable.
func detectCgroups() (*cgroupParent, error) {
	cur, err := selfCgroups()
	if err != nil {
		return nil, err
	}
	reapStaleCgroups(cur)
	name := fmt.Sprintf("medgym-%d-%d", os.Getpid(), parentSeq.Add(1))
	p := &cgroupParent{}
	for _, c := range []struct {
		ctl string
		dst *string
	}{{"memory", &p.mem}, {"pids", &p.pids}, {"cpu", &p.cpu}} {
		path, ok := cur[c.ctl]
		if !ok {
			p.remove()
			return nil, fmt.Errorf("cgroups: no v1 %s controller in /proc/self/cgroup", c.ctl)
		}
		dir := filepath.Join(cgroupRoot, c.ctl, path, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			p.remove()
			return nil, fmt.Errorf("cgroups: %w", err)
		}
		*c.dst = dir
	}
	return p, nil
}

// selfCgroups maps each v1 controller to this process's cgroup path.
func selfCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	defer f.Close()
	cur := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			cur[c] = parts[2]
		}
	}
	return cur, sc.Err()
}

// staleName matches the cgroups detectCgroups names: medgym-<pid>-<n>.
var staleName = regexp.MustCompile(`^medgym-([0-9]+)-[0-9]+$`)

// reapStaleCgroups kills what is left in the cgroups of workers that died
// without removing them (SIGKILL, a crash), beside where this worker's go
// (cur maps a controller to the worker's cgroup path), and removes them.
// This is how a sandbox can survive its worker: when the worker dies while
// bwrap is setting a sandbox up, its parent-death signal kills bwrap, and
// the sandbox's init (pid 1 of the new pid namespace) was seen blocked for
// good in eventfd_read, waiting for the bwrap that died, with no
// parent-death signal in effect: --die-with-parent does not cover that
// window (bwrap 0.8.0). It sits in the dead worker's cgroup. A worker whose
// pid is alive is left alone.
func reapStaleCgroups(cur map[string]string) {
	seen := map[string]bool{}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		path, ok := cur[ctl]
		if !ok {
			continue
		}
		ents, _ := os.ReadDir(filepath.Join(cgroupRoot, ctl, path))
		for _, e := range ents {
			m := staleName.FindStringSubmatch(e.Name())
			if m == nil || !e.IsDir() || seen[e.Name()] {
				continue
			}
			pid, err := strconv.Atoi(m[1])
			if err != nil || pid == os.Getpid() || processAlive(pid) {
				continue
			}
			seen[e.Name()] = true
			stale := &cgroupParent{}
			for _, c := range []struct {
				ctl string
				dst *string
			}{{"memory", &stale.mem}, {"pids", &stale.pids}, {"cpu", &stale.cpu}} {
				if p, ok := cur[c.ctl]; ok {
					*c.dst = filepath.Join(cgroupRoot, c.ctl, p, e.Name())
				}
			}
			stale.remove()
		}
	}
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func (p *cgroupParent) dirs() []string {
	var out []string
	for _, d := range []string{p.mem, p.pids, p.cpu} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// remove deletes the worker's cgroups after killing what is left in them.
func (p *cgroupParent) remove() {
	for _, d := range p.dirs() {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() {
				(&cgroup{dirs: []string{filepath.Join(d, e.Name())}}).destroy()
			}
		}
		_ = os.Remove(d)
	}
}

// cgroup is one run's (or one warm server's) set of v1 cgroups.
type cgroup struct {
	dirs          []string
	mem, pids     string
	cpu           string
	memswLimitErr bool
}

func (p *cgroupParent) create(name string, lim Limits, extraMem int64) (*cgroup, error) {
	cg := &cgroup{}
	for _, parent := range p.dirs() {
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			cg.destroy()
			return nil, fmt.Errorf("cgroup create: %w", err)
		}
		cg.dirs = append(cg.dirs, d)
	}
	cg.mem = filepath.Join(p.mem, name)
	cg.pids = filepath.Join(p.pids, name)
	cpu := filepath.Join(p.cpu, name)
	cg.cpu = cpu
	mem := strconv.FormatInt(lim.MemoryBytes+extraMem, 10)
	writes := [][2]string{
		{filepath.Join(cg.mem, "memory.limit_in_bytes"), mem},
		{filepath.Join(cg.pids, "pids.max"), strconv.Itoa(lim.Pids)},
		{filepath.Join(cpu, "cpu.cfs_period_us"), "100000"},
		{filepath.Join(cpu, "cpu.cfs_quota_us"), strconv.Itoa(int(lim.CPUs * 100000))},
	}
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0o644); err != nil {
			cg.destroy()
			return nil, fmt.Errorf("cgroup limit: %w", err)
		}
	}
	// Swap accounting is optional; when present, forbid swapping past the limit.
	if _, err := os.Stat(filepath.Join(cg.mem, "memory.memsw.limit_in_bytes")); err == nil {
		_ = os.WriteFile(filepath.Join(cg.mem, "memory.memsw.limit_in_bytes"), []byte(mem), 0o644)
	}
	return cg, nil
}

// setShares sets the set's CPU weight (cpu.shares; the default is 1024).
func (c *cgroup) setShares(n int) {
	if c == nil || c.cpu == "" {
		return
	}
	_ = os.WriteFile(filepath.Join(c.cpu, "cpu.shares"), []byte(strconv.Itoa(n)), 0o644)
}

// join moves pid into every cgroup of the set.
func (c *cgroup) join(pid int) error {
	for _, d := range c.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cgroup join: %w", err)
		}
	}
	return nil
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// peak is the memory high-water mark of the set.
func (c *cgroup) peak() int64 {
	if c.mem == "" {
		return 0
	}
	return readInt(filepath.Join(c.mem, "memory.max_usage_in_bytes"))
}

// oomKilled reports whether the kernel OOM-killed a process of the set.
func (c *cgroup) oomKilled() bool {
	if c.mem == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(c.mem, "memory.oom_control"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return readInt(filepath.Join(c.mem, "memory.failcnt")) > 0
}

// pidsHit reports whether a fork failed because of pids.max.
func (c *cgroup) pidsHit() bool {
	if c.pids == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(c.pids, "pids.events"))
	if err != nil {
		return false
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "max ")
	return ok && v != "0"
}

// killAll SIGKILLs every process of the set until none is left (bounded).
func (c *cgroup) killAll() {
	if c == nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, d := range c.dirs {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					n++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if n == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// destroy kills what is left and removes the cgroups.
func (c *cgroup) destroy() {
	if c == nil {
		return
	}
	c.killAll()
	for _, d := range c.dirs {
		for i := 0; i < 200; i++ {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
