package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// Container labels. medgym.workroot scopes Reap to the containers whose
// workspaces live in this worker's WorkRoot (a restarted worker on the same
// root adopts them for reaping; a worker on another root never touches them).
// A pooled container (dockerPool) has no medgym.episode, since it is created
// before its episode, but medgym.pool: the token of the runner that made it.
const (
	labelEpisode  = "medgym.episode"
	labelWorker   = "medgym.worker"
	labelWorkRoot = "medgym.workroot"
	labelPool     = "medgym.pool"
)

// dockerBootPath is where the worker's boot.py is bind-mounted (read-only).
const dockerBootPath = "/opt/medgym/boot.py"

// dockerCtlDir is where a container's control directory is bound. Its fork
// server listens on dockerCtlDir/sock until the worker has connected, then
// removes the socket; the directory holds nothing else of the worker's.
const dockerCtlDir = "/run/medgym"

// ctlSock is the name of the fork server's socket in the control directory.
const ctlSock = "sock"

// dockerOverhead is container memory on top of Limits.MemoryBytes: the
// fork server with numpy/pandas/scipy/sklearn/statsmodels imported, its
// standby child, pid 1, and the /tmp tmpfs the code writes to (as much as
// the warm pool gives its servers' cgroups).
const dockerOverhead = 512 << 20

// dockerRunner runs each episode in its own long-lived container whose
// workload is boot.py's fork server (boot.py listen): the imports are paid
// once, when the container starts, and each action is a fresh child forked
// from the pristine server, exactly as in the warm pool (forkClient). A run
// that times out, floods its output, is canceled or whose server dies gets
// the whole container killed (its pid namespace goes with init); the next
// turn starts it again on the same workspace and connects to its new
// server.
type dockerRunner struct {
	cli     *client.Client
	image   string
	root    string // WorkRoot
	meta    string
	ctlRoot string // parent (0700) of the containers' control directories
	limits  Limits
	worker  string
	// token is this runner's own: in its pooled containers' labelPool and
	// in the names of its control and pool directories, so that another
	// runner on the same WorkRoot (a restarted worker) never takes them
	// for its own.
	token   string
	asRoot  bool
	seccomp string // profile JSON; "" keeps Docker's default
	log     *slog.Logger
	seq     atomic.Int64
	pool    *dockerPool // nil: Config.DockerReady is 0

	mu   sync.Mutex
	ctrs map[string]*dockerCtr // by episode
}

type dockerCtr struct {
	id  string
	key string // resource set it was created with
	ctl string // host control directory, bound at dockerCtlDir
	// bound is the host path bound at /work when the container was
	// created: the episode's workspace, or a pool directory (which is
	// renamed to the workspace when an episode takes the container). The
	// engine resolves the path again at each start, so a container whose
	// directory was renamed is never started again (container).
	bound string
	// conn is the connection to the container's fork server (guarded by
	// dockerRunner.mu); nil: killed or never connected, so the container is
	// (re)started and connected before its next run.
	conn *net.UnixConn
}

func (d *dockerRunner) poolStats() (hits, misses int64, ready int) {
	if d.pool == nil {
		return 0, 0, 0
	}
	return d.pool.stats()
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
	meta := filepath.Join(cfg.WorkRoot, metaDir)
	ctlRoot := filepath.Join(meta, "ctl")
	// The engine binds the control directories as root, and the worker
	// dials through them: nobody else needs to reach them.
	if err := os.Mkdir(ctlRoot, 0o700); err != nil {
		cli.Close()
		return nil, fmt.Errorf("sandbox: docker control directory: %w", err)
	}
	var profile string
	if !cfg.DisableSeccomp {
		if profile, err = dockerSeccomp(); err != nil {
			cli.Close()
			return nil, err
		}
	}
	var tok [4]byte
	if _, err := rand.Read(tok[:]); err != nil {
		cli.Close()
		return nil, fmt.Errorf("sandbox: docker runner token: %w", err)
	}
	host, _ := os.Hostname()
	d := &dockerRunner{cli: cli, image: cfg.DockerImage, root: cfg.WorkRoot, meta: meta, ctlRoot: ctlRoot,
		limits: cfg.Limits, worker: fmt.Sprintf("%d@%s", os.Getpid(), host), token: hex.EncodeToString(tok[:]),
		asRoot: os.Geteuid() == 0, seccomp: profile, log: log, ctrs: map[string]*dockerCtr{}}
	if cfg.DockerReady > 0 {
		if d.pool, err = newDockerPool(d, cfg.DockerReady); err != nil {
			cli.Close()
			return nil, err
		}
	}
	return d, nil
}

// prepare creates the workspace and starts the episode's container, so its
// server's imports are paid before the first action; or, when the pool has
// a ready container for the episode's resource set, gives it that one.
func (d *dockerRunner) prepare(episode, path string, mounts []mount) error {
	if d.pool != nil {
		if c := d.pool.take(keyOf(mounts)); c != nil {
			err := d.adopt(episode, path, c)
			if err == nil {
				return nil
			}
			d.log.Warn("sandbox: docker pool container not adopted; starting one", "episode", episode, "err", err)
		}
	}
	if err := d.makeWorkspace(path); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout+time.Minute)
	defer cancel()
	_, _, err := d.container(ctx, episode, path, mounts)
	return err
}

// makeWorkspace creates an empty workspace (an episode's, or a pool
// directory that becomes one) for the sandbox user.
func (d *dockerRunner) makeWorkspace(path string) error {
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
	return nil
}

// container returns the episode's container with its running, connected
// fork server, creating or starting it when needed.
func (d *dockerRunner) container(ctx context.Context, episode, workspace string, mounts []mount) (*dockerCtr, *net.UnixConn, error) {
	key := keyOf(mounts).key
	d.mu.Lock()
	c := d.ctrs[episode]
	var conn *net.UnixConn
	if c != nil {
		conn = c.conn
	}
	d.mu.Unlock()
	if c != nil && c.key != key {
		d.remove(episode, c)
		c, conn = nil, nil
	}
	if conn != nil {
		return c, conn, nil
	}
	if c != nil {
		if c.bound == workspace {
			conn, err := d.start(ctx, c)
			if err == nil {
				return c, conn, nil
			}
			d.log.Warn("sandbox: docker restart failed; recreating", "episode", episode, "err", err)
		}
		// A pooled container binds its pool directory's old path: a
		// restart would bind whatever is there now, not the workspace.
		d.remove(episode, c)
	}
	c, err := d.create(ctx, episode, workspace, mounts, key)
	if err != nil {
		return nil, nil, err
	}
	conn, err = d.start(ctx, c)
	if err != nil {
		d.remove(episode, c)
		return nil, nil, err
	}
	return c, conn, nil
}

// create creates (but does not start) an episode's container.
func (d *dockerRunner) create(ctx context.Context, episode, workspace string, mounts []mount, key string) (*dockerCtr, error) {
	c, err := d.newCtr(ctx, workspace, mounts, key,
		map[string]string{labelEpisode: episode, labelWorker: d.worker, labelWorkRoot: d.root}, 0)
	if err != nil {
		return nil, err
	}
	// Record it before starting, so a failed start is still removed.
	d.mu.Lock()
	d.ctrs[episode] = c
	d.mu.Unlock()
	return c, nil
}

// newCtr creates (but does not start) a container with workspace bound at
// /work, the resources of mounts read-only under /data and labels.
// cpuShares is its CPU weight (0: the engine's default, 1024).
func (d *dockerRunner) newCtr(ctx context.Context, workspace string, mounts []mount, key string, labels map[string]string, cpuShares int64) (*dockerCtr, error) {
	ctl := filepath.Join(d.ctlRoot, fmt.Sprintf("c%d-%s", d.seq.Add(1), d.token))
	binds := []string{
		workspace + ":" + WorkDir + ":rw",
		filepath.Join(d.meta, "boot.py") + ":" + dockerBootPath + ":ro",
		ctl + ":" + dockerCtlDir + ":rw",
	}
	for _, m := range mounts {
		binds = append(binds, m.host+":"+m.inside+":ro")
	}
	// The server runs without PYTHONPATH (=/work), so neither the
	// interpreter's start-up nor its imports pick up modules the episode's
	// code wrote to /work; boot.py restores it in each run's child.
	var env []string
	for _, kv := range sandboxEnv() {
		if !strings.HasPrefix(kv, "PYTHONPATH=") {
			env = append(env, kv)
		}
	}
	pids := int64(d.limits.Pids)
	tmpSize := max(d.limits.FileSizeBytes, 64<<20)
	mem := d.limits.MemoryBytes + dockerOverhead
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:           d.image,
			Cmd:             []string{"/usr/bin/python3", "-s", dockerBootPath, "listen", dockerCtlDir + "/" + ctlSock},
			User:            fmt.Sprintf("%d:%d", sandboxUID, sandboxUID),
			Env:             env,
			WorkingDir:      WorkDir,
			Hostname:        "sandbox",
			NetworkDisabled: true,
			Labels:          labels,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    "none",
			ReadonlyRootfs: true,
			Binds:          binds,
			Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", tmpSize)},
			CapDrop:        []string{"ALL"},
			SecurityOpt:    d.securityOpt(),
			IpcMode:        "private",
			Resources: container.Resources{
				Memory:     mem,
				MemorySwap: mem,
				NanoCPUs:   int64(d.limits.CPUs * 1e9),
				CPUShares:  cpuShares,
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
	return &dockerCtr{id: res.ID, key: key, ctl: ctl, bound: workspace}, nil
}

// start starts a stopped container on an empty control directory and
// connects to its fork server once it is ready.
func (d *dockerRunner) start(ctx context.Context, c *dockerCtr) (*net.UnixConn, error) {
	if err := resetCtl(c.ctl, d.asRoot); err != nil {
		return nil, err
	}
	if _, err := d.cli.ContainerStart(ctx, c.id, client.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("docker start: %w", err)
	}
	conn, err := d.connect(ctx, c)
	if err != nil {
		d.killID(c.id)
		return nil, err
	}
	d.mu.Lock()
	c.conn = conn
	d.mu.Unlock()
	return conn, nil
}

// resetCtl makes a container's control directory empty and usable by the
// sandbox user before the container starts: code of an earlier run may
// have left files in it, or a link where the socket will be.
func resetCtl(dir string, asRoot bool) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("docker control directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("docker control directory: %w", err)
	}
	var err error
	if asRoot {
		err = os.Chown(dir, sandboxUID, sandboxUID)
	} else {
		// Its parent (0700) keeps other host users out.
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		return fmt.Errorf("docker control directory: %w", err)
	}
	return nil
}

// connect waits for a started container's fork server to listen (its
// socket appears once it is listening; a refused dial is retried too),
// dials it and waits until it is ready. No code of the episode runs before that
// (the server runs it only on request), so nothing but the server can have
// made the socket.
func (d *dockerRunner) connect(ctx context.Context, c *dockerCtr) (*net.UnixConn, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	sock := filepath.Join(c.ctl, ctlSock)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	checked := time.Now()
	var conn *net.UnixConn
	for conn == nil {
		var err error
		conn, err = dialSocket(sock)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("docker: fork server socket: %w", err)
		}
		if time.Since(checked) > 250*time.Millisecond {
			checked = time.Now()
			r, err := d.cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
			if err != nil {
				return nil, fmt.Errorf("docker inspect: %w", err)
			}
			if r.Container.State == nil || !r.Container.State.Running {
				return nil, fmt.Errorf("docker: container exited before its fork server listened: %s", d.logs(c.id))
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("docker: fork server not listening after %v: %s", readyTimeout, d.logs(c.id))
		case <-tick.C:
		}
	}
	wait := readyTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	// The imports take seconds: a canceled start (the pool closing) ends
	// the wait at once.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	err := awaitReady(conn, wait)
	if !stop() {
		err = context.Cause(ctx)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("docker: fork server not ready (%v): %s", err, d.logs(c.id))
	}
	return conn, nil
}

// dialSocket connects to the SOCK_SEQPACKET unix socket at path. It opens
// the socket O_PATH|O_NOFOLLOW and dials it through /proc/self/fd, so a
// link in the socket's place is refused rather than followed, and a path
// longer than sun_path (108 bytes; WorkRoot can be long) still works.
func dialSocket(path string) (*net.UnixConn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket", path)
	}
	addr := &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d", fd), Net: "unixpacket"}
	conn, err := net.DialUnix("unixpacket", nil, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return conn, nil
}

// logs returns the tail of a container's output (its server's start-up
// errors), for an error message.
func (d *dockerRunner) logs(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := d.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return fmt.Sprintf("(no logs: %v)", err)
	}
	defer rc.Close()
	b := newCapBuffer(4<<10, 0, nil)
	_, _ = stdcopy.StdCopy(b, b, rc)
	msg, _ := b.result()
	if msg = strings.TrimSpace(msg); msg == "" {
		return "no output"
	}
	return msg
}

// killID stops every process of a container (its pid 1 first: the pid
// namespace goes with it).
func (d *dockerRunner) killID(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil &&
		!cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		d.log.Warn("sandbox: docker kill", "container", id, "err", err)
	}
}

// stop kills a container whose server is broken and waits until it has
// stopped; it is started again before the episode's next run.
func (d *dockerRunner) stop(c *dockerCtr) {
	d.disconnect(c)
	d.killID(c.id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := d.cli.ContainerWait(ctx, c.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
	case err := <-w.Error:
		if !cerrdefs.IsNotFound(err) {
			d.log.Warn("sandbox: docker wait", "container", c.id, "err", err)
		}
	}
}

func (d *dockerRunner) run(ctx context.Context, spec runSpec) (runOutput, error) {
	c, conn, err := d.container(ctx, spec.episode, spec.workspace, spec.mounts)
	if err != nil {
		return runOutput{}, err
	}
	if d.asRoot {
		// The code owns /work and may chmod it; the next run's child must
		// still get in.
		if err := resetWorkspace(spec.workspace); err != nil {
			return runOutput{}, err
		}
	}
	oom0 := containerCount(cgroupRoot, c.id, ctrOOMKills)
	pids0 := containerCount(cgroupRoot, c.id, ctrPidsMax)
	fc := forkClient{conn: conn, limits: d.limits, kill: func() { d.killID(c.id) }}
	out, broken, err := fc.run(ctx, spec)
	if n := containerCount(cgroupRoot, c.id, ctrOOMKills); oom0 >= 0 && n > oom0 {
		out.oom = true
	}
	if n := containerCount(cgroupRoot, c.id, ctrPidsMax); pids0 >= 0 && n > pids0 {
		out.pidsHit = true
	}
	if broken {
		d.stop(c)
	}
	if err != nil {
		return out, fmt.Errorf("docker run: %w", err)
	}
	return out, nil
}

// ctrCounter names a counter of a container's cgroup: its v1 controller
// and file, its v2 file, and its key in them.
type ctrCounter struct{ v1ctl, v1file, v2file, key string }

var (
	ctrOOMKills = ctrCounter{"memory", "memory.oom_control", "memory.events", "oom_kill"}
	ctrPidsMax  = ctrCounter{"pids", "pids.events", "pids.events", "max"}
)

// containerCount reads a counter of a container's cgroup when the engine
// runs on this host: v1 with the cgroupfs driver (<ctl>/docker/<id>), v2
// with the cgroupfs driver (docker/<id>) or the systemd one
// (system.slice/docker-<id>.scope). -1 when none is there.
func containerCount(root, id string, c ctrCounter) int64 {
	for _, f := range []string{
		filepath.Join(root, c.v1ctl, "docker", id, c.v1file),
		filepath.Join(root, "docker", id, c.v2file),
		filepath.Join(root, "system.slice", "docker-"+id+".scope", c.v2file),
	} {
		if _, err := os.Stat(f); err == nil {
			return readKey(f, c.key)
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
	d.discard(c)
}

// disconnect closes the connection to c's server, if any.
func (d *dockerRunner) disconnect(c *dockerCtr) {
	d.mu.Lock()
	conn := c.conn
	c.conn = nil
	d.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// discard closes the connection to a forgotten container's server, removes
// the container and then its control directory.
func (d *dockerRunner) discard(c *dockerCtr) {
	d.disconnect(c)
	d.removeID(c.id)
	if err := os.RemoveAll(c.ctl); err != nil {
		d.log.Warn("sandbox: docker control directory", "dir", c.ctl, "err", err)
	}
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
// A pooled container's episode is known only to the runner that gave it
// one: this runner's own are looked up (its unassigned ones are the pool's
// to keep), and those of another runner (an earlier worker) go. Control
// and pool directories of containers an earlier worker left went with its
// meta directory at start-up.
func (d *dockerRunner) reap(live func(string) bool) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", labelWorkRoot+"="+d.root)})
	if err != nil {
		return 0, fmt.Errorf("docker reap: %w", err)
	}
	d.mu.Lock()
	episodes := make(map[string]string, len(d.ctrs)) // by container id
	for ep, c := range d.ctrs {
		episodes[c.id] = ep
	}
	d.mu.Unlock()
	n := 0
	for _, s := range res.Items {
		ep, ours := episodes[s.ID]
		if !ours {
			ep = s.Labels[labelEpisode]
		}
		switch pool, pooled := s.Labels[labelPool]; {
		case ours:
		case pooled && pool == d.token:
			continue // ready in the pool, or being started for it
		case pooled:
			ep = "" // another runner's: its episode, if any, is unknown here
		}
		if ep != "" && live(ep) {
			continue
		}
		d.mu.Lock()
		c := d.ctrs[ep]
		if c != nil && c.id == s.ID {
			delete(d.ctrs, ep)
		} else {
			c = nil
		}
		d.mu.Unlock()
		if c != nil {
			d.discard(c)
		} else {
			d.removeID(s.ID)
		}
		n++
	}
	return n, nil
}

func (d *dockerRunner) close() error {
	if d.pool != nil {
		d.pool.close()
	}
	d.mu.Lock()
	ctrs := d.ctrs
	d.ctrs = map[string]*dockerCtr{}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ctrs {
		wg.Go(func() { d.discard(c) })
	}
	wg.Wait()
	if d.pool != nil {
		d.sweepPool()
	}
	return d.cli.Close()
}

// securityOpt is no-new-privileges and, unless turned off, medgym's
// seccomp profile (dockerSeccomp).
func (d *dockerRunner) securityOpt() []string {
	opt := []string{"no-new-privileges"}
	if d.seccomp != "" {
		opt = append(opt, "seccomp="+d.seccomp)
	}
	return opt
}
