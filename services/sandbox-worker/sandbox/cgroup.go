package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// cgroupRoot is where the cgroup hierarchies are mounted: one directory
// per v1 controller, or the unified (v2) hierarchy itself.
const cgroupRoot = "/sys/fs/cgroup"

// v2Controllers are the controllers a sandbox's cgroup needs.
var v2Controllers = []string{"memory", "pids", "cpu"}

// parentSeq tells apart several sandboxes of one process.
var parentSeq atomic.Int64

// cgroupParent holds this worker's own cgroups, created under the cgroups
// the worker already sits in: on v1 one per controller (memory, pids, cpu);
// on v2 one directory of the unified hierarchy, with the three controllers
// enabled for its children.
type cgroupParent struct {
	v2             string // the unified parent; "" on v1
	mem, pids, cpu string // v1
}

// detectCgroups creates medgym-<pid>-<n> under the cgroups this process is
// in: in the memory, pids and cpu v1 hierarchies when all three are
// mounted, else in the unified v2 hierarchy when it has those controllers.
// It fails, saying why, when neither is usable.
func detectCgroups() (*cgroupParent, error) {
	cur, err := selfCgroups()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("medgym-%d-%d", os.Getpid(), parentSeq.Add(1))
	v1err := missingV1(cur)
	if v1err == nil {
		reapStaleCgroups(cur)
		return createV1(cur, name)
	}
	unified, ok := cur[""]
	if !ok {
		return nil, v1err
	}
	mount, err := unifiedMount()
	if err != nil {
		return nil, fmt.Errorf("%w; cgroups v2: %w", v1err, err)
	}
	p, err := createV2(mount, unified, name)
	if err != nil {
		return nil, fmt.Errorf("cgroups v2: %w", err)
	}
	return p, nil
}

// missingV1 says which of the v1 controllers the sandbox needs is missing.
func missingV1(cur map[string]string) error {
	for _, ctl := range v2Controllers {
		if _, ok := cur[ctl]; !ok {
			return fmt.Errorf("cgroups: no v1 %s controller in /proc/self/cgroup", ctl)
		}
	}
	return nil
}

func createV1(cur map[string]string, name string) (*cgroupParent, error) {
	p := &cgroupParent{}
	for _, c := range []struct {
		ctl string
		dst *string
	}{{"memory", &p.mem}, {"pids", &p.pids}, {"cpu", &p.cpu}} {
		dir := filepath.Join(cgroupRoot, c.ctl, cur[c.ctl], name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			p.remove()
			return nil, fmt.Errorf("cgroups: %w", err)
		}
		*c.dst = dir
	}
	return p, nil
}

// unifiedMount finds the v2 hierarchy: /sys/fs/cgroup on a unified host,
// /sys/fs/cgroup/unified on a hybrid one.
func unifiedMount() (string, error) {
	for _, d := range []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no unified hierarchy mounted at " + cgroupRoot)
}

// workerLeaf is the v2 cgroup the worker moves its cgroup's processes to
// (itself included) so that the cgroup may enable controllers for its
// children: v2 lets only a cgroup without processes of its own do that.
func workerLeaf(pid int) string { return fmt.Sprintf("medgym-worker-%d", pid) }

// createV2 sets up <mount><path>/name with the memory, pids and cpu
// controllers enabled for its children. The worker's cgroup must have them
// (a delegated cgroup: systemd's Delegate=yes, a container's own cgroup
// namespace). The worker and its children are first moved to a leaf beside
// the sandboxes' cgroups (workerLeaf, see vacate): their limits do not
// change, since the leaf is inside the same cgroup.
func createV2(mount, path, name string) (*cgroupParent, error) {
	dir := filepath.Join(mount, path)
	if filepath.Base(dir) == workerLeaf(os.Getpid()) {
		dir = filepath.Dir(dir) // moved there by an earlier sandbox of this process
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	have := strings.Fields(string(b))
	for _, c := range v2Controllers {
		if !slices.Contains(have, c) {
			return nil, fmt.Errorf("the %s controller is not delegated to %s (it has %q); run the worker in a cgroup of its own with memory, pids and cpu delegated (systemd Delegate=yes, or a container with its own cgroup namespace)", c, dir, have)
		}
	}
	reapStaleV2(dir)
	if err := enableControllers(dir); err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			return nil, err
		}
		if err := vacate(dir); err != nil {
			return nil, err
		}
		if err := enableControllers(dir); err != nil {
			return nil, err
		}
	}
	own := filepath.Join(dir, name)
	if err := os.Mkdir(own, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if err := enableControllers(own); err != nil {
		_ = os.Remove(own)
		return nil, err
	}
	return &cgroupParent{v2: own}, nil
}

// enableControllers enables the sandbox's controllers for dir's children.
func enableControllers(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	on := strings.Fields(string(b))
	var add []string
	for _, c := range v2Controllers {
		if !slices.Contains(on, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0o644); err != nil {
		return fmt.Errorf("enabling %s for the children of %s: %w", strings.Join(add, " "), dir, err)
	}
	return nil
}

// vacate moves the worker, and the children it has started, out of dir
// into its workerLeaf child. Any other process in dir is not the worker's
// to move (a login session's shell, a container's init): then dir is not
// delegated to the worker alone, and vacate says so.
func vacate(dir string) error {
	self := os.Getpid()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	var others []string
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || (pid != self && parentPid(pid) != self) {
			others = append(others, f)
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("the worker's cgroup %s also holds processes that are not the worker's (%s): run it in a cgroup of its own, with memory, pids and cpu delegated (systemd Delegate=yes, `systemd-run --scope -p Delegate=yes`, or as a container's only process)", dir, strings.Join(others, " "))
	}
	leaf := filepath.Join(dir, workerLeaf(self))
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	// The worker's children may fork while they are moved: go round until
	// none is left.
	for range 100 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return err
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(pid), 0o644)
			if err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("moving process %s out of %s into %s: %w", pid, dir, leaf, err)
			}
		}
	}
	return fmt.Errorf("processes keep appearing in %s", dir)
}

// parentPid is pid's parent process id (0 when pid is gone).
func parentPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// selfCgroups maps each v1 controller to this process's cgroup path, and
// "" to its v2 path.
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
		if parts[0] == "0" && parts[1] == "" {
			cur[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				cur[c] = parts[2]
			}
		}
	}
	return cur, sc.Err()
}

// staleName matches the cgroups detectCgroups names: medgym-<pid>-<n>.
var staleName = regexp.MustCompile(`^medgym-([0-9]+)-[0-9]+$`)

// staleLeaf matches the v2 worker leaves: medgym-worker-<pid>.
var staleLeaf = regexp.MustCompile(`^medgym-worker-([0-9]+)$`)

// stalePid returns the pid of the dead worker that named the directory,
// or 0 when it is not a medgym cgroup or its worker is alive (or is us).
func stalePid(re *regexp.Regexp, name string) int {
	m := re.FindStringSubmatch(name)
	if m == nil {
		return 0
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil || pid == os.Getpid() || processAlive(pid) {
		return 0
	}
	return pid
}

// reapStaleCgroups kills what is left in the v1 cgroups of workers that
// died without removing them (SIGKILL, a crash), beside where this
// worker's go (cur maps a controller to the worker's cgroup path), and
// removes them. This is how a sandbox can survive its worker: when the
// worker dies while bwrap is setting a sandbox up, its parent-death signal
// kills bwrap, and the sandbox's init (pid 1 of the new pid namespace) was
// seen blocked for good in eventfd_read, waiting for the bwrap that died,
// with no parent-death signal in effect: --die-with-parent does not cover
// that window (bwrap 0.8.0). It sits in the dead worker's cgroup. A worker
// whose pid is alive is left alone.
func reapStaleCgroups(cur map[string]string) {
	seen := map[string]bool{}
	for _, ctl := range v2Controllers {
		path, ok := cur[ctl]
		if !ok {
			continue
		}
		ents, _ := os.ReadDir(filepath.Join(cgroupRoot, ctl, path))
		for _, e := range ents {
			if !e.IsDir() || seen[e.Name()] || stalePid(staleName, e.Name()) == 0 {
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

// reapStaleV2 is reapStaleCgroups for the unified hierarchy: the
// sandboxes' cgroups of dead workers in dir are emptied and removed, and
// so are their leaves once their processes are gone (a leaf also holds the
// processes that shared the worker's cgroup, which live on: it stays).
func reapStaleV2(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		switch {
		case stalePid(staleName, e.Name()) != 0:
			(&cgroupParent{v2: filepath.Join(dir, e.Name())}).remove()
		case stalePid(staleLeaf, e.Name()) != 0:
			_ = os.Remove(filepath.Join(dir, e.Name())) // EBUSY while processes remain
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
	for _, d := range []string{p.v2, p.mem, p.pids, p.cpu} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// version is the cgroup version in use, for logs.
func (p *cgroupParent) version() string {
	if p.v2 != "" {
		return "v2"
	}
	return "v1"
}

// remove deletes the worker's cgroups after killing what is left in them.
func (p *cgroupParent) remove() {
	for _, d := range p.dirs() {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() {
				(&cgroup{dirs: []string{filepath.Join(d, e.Name())}, v2: p.v2 != ""}).destroy()
			}
		}
		_ = os.Remove(d)
	}
}

// cgroup is one run's (or one warm server's) set of cgroups: on v1 one
// per controller, on v2 a single directory (mem, pids and cpu all name it).
type cgroup struct {
	dirs      []string
	mem, pids string
	cpu       string
	v2        bool
}

func (p *cgroupParent) create(name string, lim Limits, extraMem int64) (*cgroup, error) {
	cg := &cgroup{v2: p.v2 != ""}
	for _, parent := range p.dirs() {
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			cg.destroy()
			return nil, fmt.Errorf("cgroup create: %w", err)
		}
		cg.dirs = append(cg.dirs, d)
	}
	mem := strconv.FormatInt(lim.MemoryBytes+extraMem, 10)
	var writes [][2]string
	if cg.v2 {
		d := cg.dirs[0]
		cg.mem, cg.pids, cg.cpu = d, d, d
		writes = [][2]string{
			{filepath.Join(d, "memory.max"), mem},
			{filepath.Join(d, "pids.max"), strconv.Itoa(lim.Pids)},
			{filepath.Join(d, "cpu.max"), strconv.Itoa(int(lim.CPUs*100000)) + " 100000"},
		}
	} else {
		cg.mem = filepath.Join(p.mem, name)
		cg.pids = filepath.Join(p.pids, name)
		cg.cpu = filepath.Join(p.cpu, name)
		writes = [][2]string{
			{filepath.Join(cg.mem, "memory.limit_in_bytes"), mem},
			{filepath.Join(cg.pids, "pids.max"), strconv.Itoa(lim.Pids)},
			{filepath.Join(cg.cpu, "cpu.cfs_period_us"), "100000"},
			{filepath.Join(cg.cpu, "cpu.cfs_quota_us"), strconv.Itoa(int(lim.CPUs * 100000))},
		}
	}
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0o644); err != nil {
			cg.destroy()
			return nil, fmt.Errorf("cgroup limit: %w", err)
		}
	}
	// Swap accounting is optional; when present, forbid swapping past the
	// limit (v1: memory+swap capped at the limit; v2: no swap at all).
	if cg.v2 {
		if _, err := os.Stat(filepath.Join(cg.mem, "memory.swap.max")); err == nil {
			_ = os.WriteFile(filepath.Join(cg.mem, "memory.swap.max"), []byte("0"), 0o644)
		}
	} else if _, err := os.Stat(filepath.Join(cg.mem, "memory.memsw.limit_in_bytes")); err == nil {
		_ = os.WriteFile(filepath.Join(cg.mem, "memory.memsw.limit_in_bytes"), []byte(mem), 0o644)
	}
	return cg, nil
}

// setShares sets the set's CPU weight in v1 cpu.shares units (default
// 1024); on v2 it becomes cpu.weight, scaled to its default of 100.
func (c *cgroup) setShares(n int) {
	if c == nil || c.cpu == "" {
		return
	}
	if c.v2 {
		w := min(max(n*100/1024, 1), 10000)
		_ = os.WriteFile(filepath.Join(c.cpu, "cpu.weight"), []byte(strconv.Itoa(w)), 0o644)
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

// readKey returns the value of "key N" in a flat-keyed file (memory.events,
// pids.events, memory.oom_control, cpu.stat); 0 when absent.
func readKey(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := keyValue(b, key)
	return n
}

// keyValue finds "key N" in the contents of a flat-keyed file.
func keyValue(b []byte, key string) (int64, bool) {
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, true
		}
	}
	return 0, false
}

// peak is the memory high-water mark of the set (0 where the kernel keeps
// none: v2 before Linux 5.19).
func (c *cgroup) peak() int64 {
	if c.mem == "" {
		return 0
	}
	if c.v2 {
		return readInt(filepath.Join(c.mem, "memory.peak"))
	}
	return readInt(filepath.Join(c.mem, "memory.max_usage_in_bytes"))
}

// oomKilled reports whether the kernel OOM-killed a process of the set.
func (c *cgroup) oomKilled() bool {
	if c.mem == "" {
		return false
	}
	if c.v2 {
		return readKey(filepath.Join(c.mem, "memory.events"), "oom_kill") > 0
	}
	b, err := os.ReadFile(filepath.Join(c.mem, "memory.oom_control"))
	if err != nil {
		return false
	}
	if n, ok := keyValue(b, "oom_kill"); ok {
		return n > 0
	}
	// Kernels before 4.13 count no OOM kills: any hit of the limit.
	return readInt(filepath.Join(c.mem, "memory.failcnt")) > 0
}

// pidsHit reports whether a fork failed because of pids.max.
func (c *cgroup) pidsHit() bool {
	if c.pids == "" {
		return false
	}
	return readKey(filepath.Join(c.pids, "pids.events"), "max") > 0
}

// killAll SIGKILLs every process of the set until none is left (bounded).
// On v2 the kernel does it in one step (cgroup.kill, Linux 5.14) where it
// can; the loop then only waits for the processes to go.
func (c *cgroup) killAll() {
	if c == nil {
		return
	}
	if c.v2 {
		for _, d := range c.dirs {
			_ = os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0o644)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.signalAll() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// signalAll SIGKILLs every process listed in the set's cgroups once and
// returns how many it found.
func (c *cgroup) signalAll() int {
	if c == nil {
		return 0
	}
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
	return n
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
