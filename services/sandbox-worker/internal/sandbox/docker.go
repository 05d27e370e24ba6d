package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Container labels. medgym.workroot scopes Reap to the containers whose
// workspaces live in this worker's WorkRoot (a restarted worker on the same
// root adopts them for reaping; a worker on another root never touches them).
const (
	labelEpisode  = "medgym.episode"
	labelWorker   = "medgym.worker"
	labelWorkRoot = "medgym.workroot"
)

// dockerBootPath is where the worker's boot.py is bind-mounted (read-only).
const dockerBootPath = "/opt/medgym/boot.py"

// dockerOverhead is container memory on top of Limits.MemoryBytes: the
// wrapper interpreter, tini, and the /tmp tmpfs the code writes to.
const dockerOverhead = 128 << 20

// dockerRunner runs each episode in its own long-lived container and each
// action as an `exec` into it (boot.py exec), so a run costs one exec, not
// a container start. A run that times out, floods its output or whose
// wrapper dies gets the whole container killed (its pid namespace goes with
// init); the next turn starts it again on the same workspace.
type dockerRunner struct {
	cli    *client.Client
	image  string
	root   string // WorkRoot
	meta   string
	limits Limits
	worker string
	asRoot bool
	log    *slog.Logger

	mu   sync.Mutex
	ctrs map[string]*dockerCtr // by episode
}

type dockerCtr struct {
	id    string
	key   string // resource set it was created with
	dirty bool   // killed: start it again before the next exec
}

func newDockerRunner(ctx context.Context, cfg Config, log *slog.Logger) (runner, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("sandbox: docker client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("sandbox: no Docker engine answers (start one with scripts/docker.sh start): %w", err)
	}
	if _, err := cli.ImageInspect(pctx, cfg.DockerImage); err != nil {
		cli.Close()
		return nil, fmt.Errorf("sandbox: docker image %s missing (build it with scripts/sandbox-image.sh): %w", cfg.DockerImage, err)
	}
	host, _ := os.Hostname()
	return &dockerRunner{cli: cli, image: cfg.DockerImage, root: cfg.WorkRoot, meta: filepath.Join(cfg.WorkRoot, metaDir),
		limits: cfg.Limits, worker: fmt.Sprintf("%d@%s", os.Getpid(), host), asRoot: os.Geteuid() == 0, log: log,
		ctrs: map[string]*dockerCtr{}}, nil
}

func (d *dockerRunner) prepare(episode, path string, mounts []mount) error {
	if err := makeWorkspace(path, d.asRoot); err != nil {
		return err
	}
	if !d.asRoot {
		// Without root the workspace cannot be given to uid 65534; WorkRoot
		// (0711) still keeps other host users from finding it.
		if err := os.Chmod(path, 0o777); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := d.container(ctx, episode, path, mounts)
	return err
}

// container returns the episode's running container, creating or starting
// it when needed.
func (d *dockerRunner) container(ctx context.Context, episode, workspace string, mounts []mount) (*dockerCtr, error) {
	key := keyOf(mounts).key
	d.mu.Lock()
	c := d.ctrs[episode]
	d.mu.Unlock()
	if c != nil && c.key != key {
		d.remove(episode, c)
		c = nil
	}
	if c != nil && c.dirty {
		if _, err := d.cli.ContainerStart(ctx, c.id, client.ContainerStartOptions{}); err != nil {
			d.log.Warn("sandbox: docker restart failed; recreating", "episode", episode, "err", err)
			d.remove(episode, c)
			c = nil
		} else {
			c.dirty = false
		}
	}
	if c != nil {
		return c, nil
	}
	binds := []string{
		workspace + ":" + WorkDir + ":rw",
		filepath.Join(d.meta, "boot.py") + ":" + dockerBootPath + ":ro",
	}
	for _, m := range mounts {
		binds = append(binds, m.host+":"+m.inside+":ro")
	}
	pids := int64(d.limits.Pids)
	tmpSize := max(d.limits.FileSizeBytes, 64<<20)
	mem := d.limits.MemoryBytes + dockerOverhead
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:           d.image,
			Cmd:             []string{"/usr/bin/python3", "-s", dockerBootPath, "init"},
			User:            fmt.Sprintf("%d:%d", sandboxUID, sandboxUID),
			Env:             sandboxEnv(),
			WorkingDir:      WorkDir,
			Hostname:        "sandbox",
			NetworkDisabled: true,
			Labels:          map[string]string{labelEpisode: episode, labelWorker: d.worker, labelWorkRoot: d.root},
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    "none",
			ReadonlyRootfs: true,
			Binds:          binds,
			Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", tmpSize)},
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges"},
			IpcMode:        "private",
			Resources: container.Resources{
				Memory:     mem,
				MemorySwap: mem,
				NanoCPUs:   int64(d.limits.CPUs * 1e9),
				PidsLimit:  &pids,
				Ulimits: []*container.Ulimit{
					{Name: "nofile", Soft: int64(d.limits.NoFile), Hard: int64(d.limits.NoFile)},
					{Name: "fsize", Soft: d.limits.FileSizeBytes, Hard: d.limits.FileSizeBytes},
					{Name: "core", Soft: 0, Hard: 0},
				},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("docker create: %w", err)
	}
	c = &dockerCtr{id: res.ID, key: key}
	// Record it before starting, so a failed start is still removed.
	d.mu.Lock()
	d.ctrs[episode] = c
	d.mu.Unlock()
	if _, err := d.cli.ContainerStart(ctx, c.id, client.ContainerStartOptions{}); err != nil {
		d.remove(episode, c)
		return nil, fmt.Errorf("docker start: %w", err)
	}
	return c, nil
}

// kill stops every process of the container; it is started again before
// the episode's next run.
func (d *dockerRunner) kill(c *dockerCtr) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.dirty = true
	if _, err := d.cli.ContainerKill(ctx, c.id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil &&
		!cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		d.log.Warn("sandbox: docker kill", "container", c.id, "err", err)
	}
}

func (d *dockerRunner) run(ctx context.Context, spec runSpec) (runOutput, error) {
	var out runOutput
	begin := time.Now()
	c, err := d.container(ctx, spec.episode, spec.workspace, spec.mounts)
	if err != nil {
		return out, err
	}
	mode := "python"
	if spec.shell {
		mode = "shell"
	}
	ex, err := d.cli.ExecCreate(ctx, c.id, client.ExecCreateOptions{
		User:         fmt.Sprintf("%d:%d", sandboxUID, sandboxUID),
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   WorkDir,
		Cmd: []string{"/usr/bin/python3", "-s", dockerBootPath, "exec", mode,
			strconv.Itoa(d.limits.CPUSeconds), strconv.FormatInt(d.limits.FileSizeBytes, 10),
			strconv.Itoa(d.limits.NoFile), strconv.FormatInt(d.limits.MemoryBytes, 10)},
	})
	if err != nil {
		return out, fmt.Errorf("docker exec create: %w", err)
	}
	att, err := d.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return out, fmt.Errorf("docker exec attach: %w", err)
	}
	defer att.Close()
	oom0 := cgroupOOMCount(c.id)

	var kmu sync.Mutex
	var cause error
	kill := func(why error) {
		kmu.Lock()
		first := cause == nil
		if first {
			cause = why
		}
		kmu.Unlock()
		if first {
			d.kill(c)
			att.Close()
		}
	}
	hard := int64(d.limits.OutputBytes) * 64
	stdout := newCapBuffer(d.limits.OutputBytes, hard, func() { go kill(errFlood) })
	stderr := newCapBuffer(d.limits.OutputBytes, hard, func() { go kill(errFlood) })
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = stdcopy.StdCopy(stdout, stderr, att.Reader)
	}()
	go func() {
		_, _ = io.WriteString(att.Conn, spec.code)
		if cw, ok := att.Conn.(client.CloseWriter); ok {
			_ = cw.CloseWrite()
		}
	}()
	timer := time.NewTimer(spec.timeout)
	defer timer.Stop()
	select {
	case <-copied:
	case <-timer.C:
		kill(errTimeout)
		<-copied
	case <-ctx.Done():
		kill(context.Cause(ctx))
		<-copied
	}
	out.duration = time.Since(begin)
	kmu.Lock()
	final := cause
	kmu.Unlock()
	out.stdout, out.truncated = stdout.result()
	var tr bool
	out.stderr, tr = stderr.result()
	out.truncated = out.truncated || tr
	switch {
	case errors.Is(final, errTimeout):
		out.timedOut, out.exitCode, out.signal = true, -1, syscall.SIGKILL
		return out, nil
	case errors.Is(final, errFlood):
		out.flood, out.exitCode, out.signal = true, -1, syscall.SIGKILL
		return out, nil
	case final != nil:
		return out, fmt.Errorf("docker run canceled: %w", final)
	}
	code, err := d.exitCode(ex.ID)
	if err != nil {
		d.kill(c)
		return out, err
	}
	if oom := cgroupOOMCount(c.id); oom0 >= 0 && oom > oom0 {
		out.oom = true
	}
	if code > 128 {
		// A signal ended the child, or the code killed the wrapper, which
		// then could not clean up: restart the container to be sure nothing
		// the run started survives it.
		d.kill(c)
		if code < 128+65 {
			out.exitCode, out.signal = -1, syscall.Signal(code-128)
			return out, nil
		}
	}
	out.exitCode = code
	return out, nil
}

// exitCode waits (briefly) for the exec to be reported finished.
func (d *dockerRunner) exitCode(id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		r, err := d.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		if err != nil {
			return 0, fmt.Errorf("docker exec inspect: %w", err)
		}
		if !r.Running {
			return r.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, errors.New("docker exec still running after its output closed")
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// cgroupOOMCount reads the container's v1 memory cgroup OOM-kill counter
// when the engine runs on this host with the cgroupfs driver; -1 otherwise.
func cgroupOOMCount(id string) int64 {
	b, err := os.ReadFile(filepath.Join(cgroupRoot, "memory", "docker", id, "memory.oom_control"))
	if err != nil {
		return -1
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return -1
}

// remove deletes a container (and forgets it).
func (d *dockerRunner) remove(episode string, c *dockerCtr) {
	d.mu.Lock()
	if d.ctrs[episode] == c {
		delete(d.ctrs, episode)
	}
	d.mu.Unlock()
	d.removeID(c.id)
}

func (d *dockerRunner) removeID(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		d.log.Warn("sandbox: docker remove", "container", id, "err", err)
	}
}

func (d *dockerRunner) release(episode string) {
	d.mu.Lock()
	c := d.ctrs[episode]
	d.mu.Unlock()
	if c != nil {
		d.remove(episode, c)
	}
}

// reap removes every container of this WorkRoot whose episode is not live.
func (d *dockerRunner) reap(live func(string) bool) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", labelWorkRoot+"="+d.root)})
	if err != nil {
		return 0, fmt.Errorf("docker reap: %w", err)
	}
	n := 0
	for _, s := range res.Items {
		ep := s.Labels[labelEpisode]
		if live(ep) {
			continue
		}
		d.mu.Lock()
		if c := d.ctrs[ep]; c != nil && c.id == s.ID {
			delete(d.ctrs, ep)
		}
		d.mu.Unlock()
		d.removeID(s.ID)
		n++
	}
	return n, nil
}

func (d *dockerRunner) close() error {
	d.mu.Lock()
	ctrs := d.ctrs
	d.ctrs = map[string]*dockerCtr{}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ctrs {
		wg.Go(func() { d.removeID(c.id) })
	}
	wg.Wait()
	return d.cli.Close()
}
