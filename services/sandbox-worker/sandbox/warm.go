package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// warmPool keeps fork servers (boot.py serve) ready, each inside its own
// bwrap sandbox with its own fresh workspace ("slot"). A new episode adopts
// a ready server: its slot directory is renamed to the episode's workspace
// (the bind mount follows the directory), so the server serves that one
// episode for its whole life and never sees another episode's files. Each
// run is a fresh child forked from the pristine server.
type warmPool struct {
	*bwrapBase
	root string // WorkRoot
	want int
	log  *slog.Logger

	mu     sync.Mutex
	idle   map[string][]*server // by resource key
	keys   []resKey             // most recently used resource sets, newest first
	bound  map[string]*server
	slots  int
	closed bool
	kick   chan struct{}
	wg     sync.WaitGroup

	poolCounts
}

// server is one running fork server.
type resKey struct {
	key    string
	mounts []mount
}

func keyOf(m []mount) resKey {
	k := ""
	for _, x := range m {
		k += x.host + "\x00" + x.inside + "\x00"
	}
	return resKey{key: k, mounts: m}
}

// maxKeys bounds how many resource sets get ready servers.
const maxKeys = 2

type server struct {
	key   string
	st    *started
	conn  *net.UnixConn
	dir   string // host workspace bound at /work
	dead  chan struct{}
	runMu sync.Mutex
	// refill: the pool is to be refilled once this server's first run
	// ends (it was adopted from the pool; see prepare).
	refill atomic.Bool
}

func newWarmPool(b *bwrapBase, root string, want int, log *slog.Logger) *warmPool {
	p := &warmPool{bwrapBase: b, root: root, want: want, log: log, bound: map[string]*server{},
		idle: map[string][]*server{}, keys: []resKey{{}}, kick: make(chan struct{}, 1)}
	p.wg.Add(1)
	go p.fill()
	p.kick <- struct{}{}
	return p
}

// fill keeps want idle servers ready.
func (p *warmPool) fill() {
	defer p.wg.Done()
	for range p.kick {
		for {
			p.mu.Lock()
			var k *resKey
			for i := range p.keys {
				if len(p.idle[p.keys[i].key]) < p.want {
					k = &p.keys[i]
					break
				}
			}
			if p.closed || k == nil {
				p.mu.Unlock()
				break
			}
			key := *k
			p.slots++
			dir := filepath.Join(p.root, metaDir, fmt.Sprintf("slot-%d", p.slots))
			p.mu.Unlock()
			srv, err := p.startServer(dir, true, key)
			if err != nil {
				p.log.Error("sandbox: warm server start failed", "err", err)
				break
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				srv.stop()
				_ = os.RemoveAll(dir)
				return
			}
			p.idle[key.key] = append(p.idle[key.key], srv)
			p.mu.Unlock()
		}
	}
}

// readyTimeout bounds a warm server's start-up (imports and warm-up).
const readyTimeout = 2 * time.Minute

// startServer starts a fork server with dir bound at /work (a new slot
// directory when fresh, else an episode's workspace) and waits until it is
// ready. Every error is a sandbox failure: no code of the episode runs in
// a server before it is ready (the server runs without PYTHONPATH, so
// modules planted in /work are not imported until a run's child).
func (p *warmPool) startServer(dir string, fresh bool, key resKey) (*server, error) {
	if fresh {
		if err := makeWorkspace(dir, p.asRoot); err != nil {
			return nil, err
		}
	} else if err := resetWorkspace(dir); err != nil {
		return nil, err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("warm server: socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "warm-ctl")
	theirs := os.NewFile(uintptr(fds[1]), "warm-ctl-child")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("warm server: %w", err)
	}
	conn := fc.(*net.UnixConn)
	// Server-wide limits; each run's child sets its own (CPU, data, fsize...).
	script := rlimitScript(0, p.limits.FileSizeBytes, 0, p.nproc(), p.limits.NoFile+16)
	cmd := []string{p.python, "-s", bootPath, "serve", "5"}
	name := fmt.Sprintf("warm-%d", p.seq.Add(1))
	// Without PYTHONPATH (=/work) the interpreter's start-up (sitecustomize)
	// and the server's imports and warm-up cannot pick up modules the
	// episode's code wrote to /work; boot.py restores it in each run's child.
	// --as-pid-1: the server itself is the sandbox's init, not a bwrap
	// reaper that would stay dumpable (a run could write into its memory
	// and outlive the run through it). The server reaps what its runs
	// leave behind and kills it all after each run.
	args := append(p.args(dir, key.mounts), "--unsetenv", "PYTHONPATH", "--as-pid-1")
	// The server's own output still goes to the worker's stderr; its start
	// (bwrap's errors, a boot.py traceback) is kept for the error.
	boot := newCapBuffer(4<<10, 0, nil)
	output := serverOutput{boot}
	st, err := p.start(name, script, args, cmd, output, output, []*os.File{theirs}, 512<<20)
	if err != nil {
		conn.Close()
		return nil, err
	}
	// Only the server may hold the peer end now: when it dies before it is
	// ready, the read below sees EOF instead of waiting for the deadline.
	theirs.Close()
	// A pool refill imports for ~1-2 CPU-seconds; on a small machine it
	// must not slow the runs of servers already serving, so it gets a low
	// CPU weight until it is ready. A server an episode waits for does not.
	if fresh {
		st.cg.setShares(16)
	}
	srv := &server{key: key.key, st: st, conn: conn, dir: dir, dead: make(chan struct{})}
	var werr error
	go func() { werr = st.cmd.Wait(); close(srv.dead) }()
	err = awaitReady(conn, readyTimeout)
	if err == nil {
		st.cg.setShares(1024)
		return srv, nil
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		srv.stop()
		msg, _ := boot.result()
		return nil, fmt.Errorf("warm server: not ready after %v: %s", readyTimeout, strings.TrimSpace(msg))
	}
	// The server closed its end: bwrap is exiting (it holds the socket too)
	// and reports on its status fd first. Let it finish before the kill.
	select {
	case <-srv.dead:
	case <-time.After(10 * time.Second):
	}
	srv.stop()
	status := <-st.status
	msg, _ := boot.result()
	if !status.ran {
		return nil, fmt.Errorf("warm server: %w", setupError(status, werr, msg))
	}
	return nil, fmt.Errorf("warm server: exited with status %d before it was ready (read: %v): %s", status.exitCode, err, strings.TrimSpace(msg))
}

// serverOutput is a warm server's stdout and stderr: the worker's stderr,
// as before, plus the first bytes kept for a start-up error.
type serverOutput struct{ keep *capBuffer }

func (w serverOutput) Write(b []byte) (int, error) {
	_, _ = w.keep.Write(b)
	_, _ = os.Stderr.Write(b) // a closed stderr must not stall the server
	return len(b), nil
}

// stop kills the server and everything in its sandbox and removes its
// cgroups. It waits for bwrap's exit rather than polling the cgroup: the
// server is the pid namespace's init, and the kernel empties a namespace
// whose init died before that init's parent, bwrap, can reap it and exit.
func (s *server) stop() {
	s.st.signal()
	s.conn.Close()
	<-s.dead
	s.st.cg.destroy()
}

func (p *warmPool) prepare(episode, path string, mounts []mount) error {
	k := keyOf(mounts)
	p.mu.Lock()
	var srv *server
	if q := p.idle[k.key]; len(q) > 0 {
		srv = q[0]
		p.idle[k.key] = q[1:]
	}
	// A ready server taken: the refill (an interpreter start, ~1-2
	// CPU-seconds) waits until the episode's first run has ended, so it
	// does not compete with that run for the CPU. None ready: the refill
	// starts now.
	p.touchKey(k, srv == nil)
	p.mu.Unlock()
	if srv == nil {
		p.misses.Add(1)
		return makeWorkspace(path, p.asRoot)
	}
	p.hits.Add(1)
	srv.refill.Store(true)
	if err := os.Rename(srv.dir, path); err != nil {
		srv.stop()
		p.refillAfter(srv)
		_ = os.RemoveAll(srv.dir)
		return fmt.Errorf("warm adopt: %w", err)
	}
	srv.dir = path
	p.mu.Lock()
	p.bound[episode] = srv
	p.mu.Unlock()
	return nil
}

func (p *warmPool) poolStats() (hits, misses int64, ready int) {
	return snapshotPool(&p.poolCounts, &p.mu, p.idle)
}

// touchKey records k as the most recently used resource set, evicts the
// idle servers of sets that fall out, and wakes the filler when kick is
// set. Call with p.mu.
func (p *warmPool) touchKey(k resKey, kick bool) {
	keys := []resKey{k}
	for _, x := range p.keys {
		if x.key != k.key {
			keys = append(keys, x)
		}
	}
	for len(keys) > maxKeys {
		old := keys[len(keys)-1]
		keys = keys[:len(keys)-1]
		for _, s := range p.idle[old.key] {
			go func() { s.stop(); _ = os.RemoveAll(s.dir) }()
		}
		delete(p.idle, old.key)
	}
	p.keys = keys
	if kick {
		p.wakeFiller()
	}
}

// wakeFiller wakes the filler. Call with p.mu.
func (p *warmPool) wakeFiller() {
	if !p.closed {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// refillAfter wakes the filler after the first run of a server adopted
// from the pool (or when it goes without one).
func (p *warmPool) refillAfter(srv *server) {
	if !srv.refill.Swap(false) {
		return
	}
	p.mu.Lock()
	p.wakeFiller()
	p.mu.Unlock()
}

// serverFor returns the episode's server, starting one on the existing
// workspace when it has none (first use without a ready server, or after a
// timeout killed the previous one).
func (p *warmPool) serverFor(episode, workspace string, mounts []mount) (*server, error) {
	k := keyOf(mounts)
	p.mu.Lock()
	srv := p.bound[episode]
	p.mu.Unlock()
	if srv != nil && srv.key != k.key {
		p.drop(episode, srv)
		srv = nil
	}
	if srv != nil {
		select {
		case <-srv.dead:
			srv.stop()
			srv = nil
		default:
		}
	}
	if srv != nil {
		return srv, nil
	}
	srv, err := p.startServer(workspace, false, k)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		srv.stop()
		return nil, errors.New("warm pool closed")
	}
	p.bound[episode] = srv
	p.mu.Unlock()
	return srv, nil
}

func (p *warmPool) run(ctx context.Context, spec runSpec) (runOutput, error) {
	srv, err := p.serverFor(spec.episode, spec.workspace, spec.mounts)
	if err != nil {
		return runOutput{}, err
	}
	srv.runMu.Lock()
	defer srv.runMu.Unlock()
	defer p.refillAfter(srv)
	if err := resetWorkspace(spec.workspace); err != nil {
		return runOutput{}, err
	}
	oomBefore := srv.st.cg != nil && srv.st.cg.oomKilled()
	fc := forkClient{conn: srv.conn, limits: p.limits, nproc: p.nproc(), kill: srv.st.kill}
	out, broken, err := fc.run(ctx, spec)
	if srv.st.cg != nil {
		out.oom = !oomBefore && srv.st.cg.oomKilled()
		out.pidsHit = srv.st.cg.pidsHit()
	}
	if broken {
		p.drop(spec.episode, srv)
	}
	if err != nil {
		return out, fmt.Errorf("warm run: %w", err)
	}
	return out, nil
}

// drop forgets and stops an episode's server (the workspace stays).
func (p *warmPool) drop(episode string, srv *server) {
	p.mu.Lock()
	if p.bound[episode] == srv {
		delete(p.bound, episode)
	}
	p.mu.Unlock()
	srv.stop()
	p.refillAfter(srv)
}

func (p *warmPool) release(episode string) {
	p.mu.Lock()
	srv := p.bound[episode]
	delete(p.bound, episode)
	p.mu.Unlock()
	if srv != nil {
		srv.stop()
		p.refillAfter(srv)
	}
}

func (p *warmPool) reap(live func(string) bool) (int, error) {
	p.mu.Lock()
	var stale []string
	for ep := range p.bound {
		if !live(ep) {
			stale = append(stale, ep)
		}
	}
	p.mu.Unlock()
	for _, ep := range stale {
		p.release(ep)
	}
	return len(stale), nil
}

func (p *warmPool) close() error {
	p.mu.Lock()
	p.closed = true
	close(p.kick)
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	idle := p.idle
	p.idle = map[string][]*server{}
	bound := p.bound
	p.bound = map[string]*server{}
	p.mu.Unlock()
	for _, q := range idle {
		for _, s := range q {
			s.stop()
			_ = os.RemoveAll(s.dir)
		}
	}
	for _, s := range bound {
		s.stop()
	}
	return nil
}
