package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// sandboxUID is the unprivileged uid agent code runs as, inside the
// sandbox and (when the worker is root) on the host too.
const sandboxUID = 65534

// In-sandbox paths of medgym's own files.
const (
	bootPath     = "/tmp/.medgym/boot.py"
	codeFilePath = "/tmp/main.py"
)

var (
	errTimeout = errors.New("wall-clock timeout")
	errFlood   = errors.New("output limit exceeded")
	// errSetup: bwrap did not run the command (it could not set up the
	// sandbox, or exec failed), so the failure is the sandbox's, not the
	// code's. Only bwrap's status report says so, never text on stderr,
	// which code can forge.
	errSetup = errors.New("bwrap could not set up the sandbox")
)

// mount is a read-only bind of a host path into the sandbox.
type mount struct{ host, inside string }

// runSpec is one program to run in an episode's workspace.
type runSpec struct {
	episode   string
	workspace string // host path of the workspace
	mounts    []mount
	shell     bool   // code is a /bin/sh command line
	code      string // Python source or shell command
	timeout   time.Duration
}

// runOutput is what a run produced, before it is turned into an ExecResult.
type runOutput struct {
	exitCode  int
	signal    syscall.Signal
	stdout    string
	stderr    string
	truncated bool
	// stdoutBytes and stderrBytes are what the run wrote, before the cap.
	stdoutBytes, stderrBytes int64
	duration                 time.Duration
	peak                     int64
	timedOut                 bool // wall clock
	oom                      bool
	pidsHit                  bool
	flood                    bool
}

// runner is one backend's way of running code.
type runner interface {
	// prepare creates the workspace of a new episode at path.
	prepare(episode, path string, mounts []mount) error
	// run executes spec; an error means the sandbox failed, not the code.
	run(ctx context.Context, spec runSpec) (runOutput, error)
	// release stops whatever the backend keeps for an episode.
	release(episode string)
	// reap removes backend resources of episodes that are not live.
	reap(live func(string) bool) (int, error)
	close() error
}

// bwrapBase holds what every bubblewrap-based runner shares.
type bwrapBase struct {
	bwrap    string
	python   string
	meta     string // host dir with boot.py, passwd, group
	limits   Limits
	cg       *cgroupParent // nil: rlimits only
	asRoot   bool          // worker is root: drop to sandboxUID on the host too
	seq      atomic.Int64
	overhead int64        // extra cgroup memory for the interpreter itself
	seccomp  []byte       // BPF program bwrap loads before the command; nil: none
	masks    []maskedPath // host paths under /usr hidden behind empty placeholders
}

// sandboxEnv is the complete environment of agent code.
func sandboxEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + WorkDir,
		"USER=nobody",
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		"TMPDIR=/tmp",
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH=" + WorkDir,
		"PYTHONHASHSEED=0",
		"OPENBLAS_NUM_THREADS=1",
		"OMP_NUM_THREADS=1",
		"MKL_NUM_THREADS=1",
		"MPLBACKEND=Agg",
	}
}

// args builds bwrap's arguments up to (not including) the command.
func (b *bwrapBase) args(workspace string, mounts []mount) []string {
	a := []string{
		"--unshare-all", "--unshare-user", "--uid", strconv.Itoa(sandboxUID), "--gid", strconv.Itoa(sandboxUID),
		"--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr",
	}
	a = append(a, maskArgs(b.meta, b.masks)...)
	a = append(a,
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
		"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
		"--ro-bind", filepath.Join(b.meta, "passwd"), "/etc/passwd",
		"--ro-bind", filepath.Join(b.meta, "group"), "/etc/group",
		"--proc", "/proc", "--dev", "/dev",
		"--tmpfs", "/tmp",
		"--ro-bind", filepath.Join(b.meta, "boot.py"), bootPath,
		"--bind", workspace, WorkDir,
	)
	for _, m := range mounts {
		a = append(a, "--ro-bind", m.host, m.inside)
	}
	a = append(a, "--chdir", WorkDir, "--remount-ro", "/", "--clearenv")
	for _, kv := range sandboxEnv() {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	return a
}

// rlimitScript is a /bin/sh prologue that sets rlimits, waits on fd 3 until
// the worker has put it into its cgroups, then execs "$@".
func rlimitScript(cpu int, fsize int64, data int64, nproc, nofile int) string {
	var s strings.Builder
	if cpu > 0 {
		fmt.Fprintf(&s, "ulimit -t %d && ", cpu)
	}
	fmt.Fprintf(&s, "ulimit -f %d && ", (fsize+511)/512)
	if data > 0 {
		fmt.Fprintf(&s, "ulimit -d %d && ", data/1024)
	}
	fmt.Fprintf(&s, "ulimit -p %d && ulimit -n %d && ulimit -c 0 && ", nproc, nofile)
	s.WriteString(`read _ <&3 && exec 3<&- && exec "$@"`)
	return s.String()
}

// nproc is the rlimit backstop for processes; it counts all processes of
// the host uid, so it is loose when a pids cgroup does the real limiting.
func (b *bwrapBase) nproc() int {
	if b.cg != nil {
		return b.limits.Pids*4 + 256
	}
	return b.limits.Pids
}

// started is a launched bwrap process waiting in its prologue.
type started struct {
	cmd *exec.Cmd
	cg  *cgroup
	// status delivers what bwrap reported on --json-status-fd, once bwrap
	// has exited (or been killed).
	status <-chan bwrapStatus
}

// start launches `sh -c prologue sh bwrap ARGS... CMD...` with the given
// extra files (fd 5 on) and joins it to a new cgroup before releasing it.
// When b has a seccomp program, it follows the extra files on a pipe.
func (b *bwrapBase) start(name string, script string, bargs, command []string, stdout, stderr io.Writer, extra []*os.File, cgExtraMem int64) (*started, error) {
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox start: %w", err)
	}
	defer syncR.Close()
	defer syncW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox start: %w", err)
	}
	defer statW.Close()
	cmd, filter, err := b.command(script, bargs, command, append([]*os.File{syncR, statW}, extra...))
	if err != nil {
		statR.Close()
		return nil, fmt.Errorf("sandbox start: %w", err)
	}
	if filter != nil {
		defer filter.Close()
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if b.asRoot {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: sandboxUID, Gid: sandboxUID, Groups: []uint32{}}
	}
	var cg *cgroup
	if b.cg != nil {
		cg, err = b.cg.create(name, b.limits, cgExtraMem)
		if err != nil {
			statR.Close()
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		statR.Close()
		cg.destroy()
		return nil, fmt.Errorf("sandbox start: %w", err)
	}
	if cg != nil {
		if err := cg.join(cmd.Process.Pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			statR.Close()
			cg.destroy()
			return nil, err
		}
	}
	if _, err := syncW.Write([]byte("go\n")); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		statR.Close()
		cg.destroy()
		return nil, fmt.Errorf("sandbox start: %w", err)
	}
	status := make(chan bwrapStatus, 1)
	go func() {
		defer statR.Close()
		status <- readStatus(statR)
	}()
	return &started{cmd: cmd, cg: cg, status: status}, nil
}

// command prepares start's `sh -c prologue sh bwrap ARGS... CMD...`;
// files become fds 3, 4... in order (4 is bwrap's status fd). When b has a
// seccomp program, a pipe holding it follows them and is passed to
// bwrap's --seccomp; the caller closes that pipe (filter) once started.
func (b *bwrapBase) command(script string, bargs, command []string, files []*os.File) (cmd *exec.Cmd, filter *os.File, err error) {
	args := []string{"-c", script, "sh", b.bwrap, "--json-status-fd", "4"}
	if b.seccomp != nil {
		filter, err = seccompFile(b.seccomp)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, "--seccomp", strconv.Itoa(3+len(files))) // ExtraFiles[i] is fd 3+i
		files = append(files[:len(files):len(files)], filter)
	}
	args = append(append(args, bargs...), command...)
	cmd = exec.Command("/bin/sh", args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.ExtraFiles = files
	return cmd, filter, nil
}

// kill stops the whole sandbox: the process group outside, and through
// the cgroup (or the pid namespace dying with its init) everything inside.
// It returns once the cgroup is empty (bounded).
func (s *started) kill() {
	s.signal()
	s.cg.killAll()
}

// signal sends SIGKILL to the process group outside and to every process
// of the cgroup, without waiting for them to go.
func (s *started) signal() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	s.cg.signalAll()
}

// bwrapStatus is what bwrap reported on --json-status-fd.
//
// bwrap writes {"child-pid": N, ...} right after it clones the sandbox's
// first process, before that process sets the sandbox up (mounts, chdir,
// seccomp): a sandbox whose setup then fails has a child-pid too. Only
// once setup is complete and exec succeeded does the child tell bwrap so
// (bwrap's setup_finished pipe), and only then does bwrap write
// {"exit-code": N} when the command exits; an exec that failed, a setup
// that failed, or a bwrap that was killed reports no exit-code.
// Checked with bwrap 0.8.0 (Debian bookworm). The fd is not passed into
// the sandbox: neither the command nor bwrap's pid 1 holds it.
type bwrapStatus struct {
	childStarted bool // child-pid seen: bwrap cloned the sandbox
	ran          bool // exit-code seen: the command ran, and exited with exitCode
	exitCode     int  // as a shell reports it: n, or 128+n for signal n
}

// readStatus reads bwrap's status stream (JSON documents, one a line) to
// EOF. Documents and members it does not know are ignored, as bwrap's
// manual asks; the stream stops at the first one that is not JSON.
func readStatus(r io.Reader) bwrapStatus {
	var st bwrapStatus
	dec := json.NewDecoder(r)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			_, _ = io.Copy(io.Discard, r) // never block bwrap on a full pipe
			return st
		}
		var m struct {
			ChildPID *int64 `json:"child-pid"`
			ExitCode *int   `json:"exit-code"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		if m.ChildPID != nil {
			st.childStarted = true
		}
		if m.ExitCode != nil {
			st.ran, st.exitCode = true, *m.ExitCode
		}
	}
}

// setupError is the error for a bwrap run that never ran the command: bwrap
// exited with werr and stderr holds only its own (and the prologue's)
// messages, since the command never started.
func setupError(st bwrapStatus, werr error, stderr string) error {
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		msg = "no message"
	}
	stage := "before creating it"
	if st.childStarted {
		stage = "after creating it"
	}
	if werr != nil {
		return fmt.Errorf("%w (%s, %v): %s", errSetup, stage, werr, msg)
	}
	return fmt.Errorf("%w (%s): %s", errSetup, stage, msg)
}

// resetWorkspace restores the mode of an episode's workspace before bwrap
// binds it. Code may chmod its /work; at 000, bwrap (as the sandbox user)
// could not chdir into it, and the code would have made its own next run
// fail as a sandbox setup failure.
func resetWorkspace(path string) error {
	if err := os.Chmod(path, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// coldRunner runs each action in a fresh bwrap + interpreter.
type coldRunner struct{ *bwrapBase }

func (c *coldRunner) prepare(_, path string, _ []mount) error { return makeWorkspace(path, c.asRoot) }
func (c *coldRunner) release(string)                          {}
func (c *coldRunner) reap(func(string) bool) (int, error) {
	return 0, nil
}
func (c *coldRunner) close() error { return nil }

// makeWorkspace creates a workspace owned by the sandbox user.
func makeWorkspace(path string, asRoot bool) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if asRoot {
		if err := os.Chown(path, sandboxUID, sandboxUID); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	return nil
}

func (c *coldRunner) run(ctx context.Context, spec runSpec) (runOutput, error) {
	var out runOutput
	n := c.seq.Add(1)
	name := fmt.Sprintf("run-%d", n)
	bargs := c.args(spec.workspace, spec.mounts)
	var command []string
	var extra []*os.File
	if spec.shell {
		command = []string{"/bin/sh", "-c", spec.code}
	} else {
		f, err := os.CreateTemp(c.meta, "code-*.py")
		if err != nil {
			return out, fmt.Errorf("sandbox code file: %w", err)
		}
		defer os.Remove(f.Name())
		_, werr := f.WriteString(spec.code)
		cerr := f.Close()
		if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o644)); err != nil {
			return out, fmt.Errorf("sandbox code file: %w", err)
		}
		bargs = append(bargs, "--ro-bind", f.Name(), codeFilePath)
		command = []string{c.python, "-s", bootPath, "run", codeFilePath}
	}
	if err := resetWorkspace(spec.workspace); err != nil {
		return out, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, spec.timeout, errTimeout)
	defer cancel()
	ctx, cancelFlood := context.WithCancelCause(ctx)
	defer cancelFlood(nil)
	hard := int64(c.limits.OutputBytes) * 64
	stdout := newCapBuffer(c.limits.OutputBytes, hard, func() { cancelFlood(errFlood) })
	stderr := newCapBuffer(c.limits.OutputBytes, hard, func() { cancelFlood(errFlood) })
	script := rlimitScript(c.limits.CPUSeconds, c.limits.FileSizeBytes, c.limits.MemoryBytes, c.nproc(), c.limits.NoFile)
	begin := time.Now()
	st, err := c.start(name, script, bargs, command, stdout, stderr, extra, c.overhead)
	if err != nil {
		return out, err
	}
	defer st.cg.destroy()
	waitErr := make(chan error, 1)
	go func() { waitErr <- st.cmd.Wait() }()
	var werr error
	select {
	case werr = <-waitErr:
	case <-ctx.Done():
		st.kill()
		werr = <-waitErr
	}
	out.duration = time.Since(begin)
	st.kill() // nothing may outlive the run
	status := <-st.status
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTimeout):
		out.timedOut = true
	case errors.Is(cause, errFlood):
		out.flood = true
	default:
		if ctx.Err() != nil {
			return out, fmt.Errorf("run canceled: %w", context.Cause(ctx))
		}
	}
	out.stdout, out.truncated = stdout.result()
	var tr bool
	out.stderr, tr = stderr.result()
	out.truncated = out.truncated || tr
	out.stdoutBytes, out.stderrBytes = stdout.size(), stderr.size()
	if st.cg != nil {
		out.peak = st.cg.peak()
		out.oom = st.cg.oomKilled()
		out.pidsHit = st.cg.pidsHit()
	}
	if out.timedOut || out.flood {
		out.exitCode, out.signal = -1, syscall.SIGKILL
		return out, nil
	}
	if !status.ran {
		if out.oom {
			// Setup cannot fill the cgroup's memory: the code ran, and
			// the OOM killer took bwrap with it.
			out.exitCode, out.signal = -1, syscall.SIGKILL
			return out, nil
		}
		// bwrap never ran the command, so stderr is bwrap's own.
		return out, setupError(status, werr, out.stderr)
	}
	code := status.exitCode
	if code > 128 && code < 128+65 {
		out.exitCode, out.signal = -1, syscall.Signal(code-128)
	} else {
		out.exitCode = code
	}
	return out, nil
}
