package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// dockerPool keeps containers of the docker backend ready for new
// episodes: created, started, connected, their fork server's imports done,
// each with a new empty directory of its own bound at /work
// (WorkRoot/.medgym/pool/w<n>-<token>). A new episode takes one (prepare):
// its directory is renamed to the episode's workspace path (the bind mount
// follows the directory), and from then on the container is the episode's
// alone, exactly like one started on demand, until Release/Reap/Close
// remove it. A container is never handed out twice and never goes back to
// the pool; a new one is started in the background for the one taken.
//
// Containers are created with their resource set's mounts, so the pool
// keeps them for the resource sets of the episodes that started most
// recently (maxKeys), want of them in all, shared out between those sets.
// The first episode of a set (and any episode that finds none ready)
// starts its container on demand, as without a pool.
//
// Lock order: dockerPool.mu is never held while calling into the
// dockerRunner (which takes dockerRunner.mu).
type dockerPool struct {
	d    *dockerRunner
	want int
	root string // parent (0700) of the pool directories
	// ctx is canceled by close, which ends the starts under way.
	ctx    context.Context
	cancel context.CancelFunc

	poolCounts

	mu     sync.Mutex
	idle   map[string][]*dockerCtr // ready containers by resource key, oldest first
	making map[string]int          // starts under way by resource key
	failed map[string]time.Time    // last failed start by resource key
	keys   []resKey                // most recently used resource sets, newest first
	closed bool
	wg     sync.WaitGroup // starts and removals under way
}

// dockerFillers bounds the pool's container starts at once: each imports
// for ~1-2 CPU-seconds, which the episodes' runs should not wait behind.
const dockerFillers = 2

// poolRetry is how long a resource set whose container failed to start
// gets no new attempt (its mount source may be gone).
const poolRetry = 10 * time.Second

// poolShares is the CPU weight of a pooled container until its server is
// ready (as the warm pool's refills): its imports yield to the runs of
// containers already serving. It then gets the default weight.
const poolShares = 16

func newDockerPool(d *dockerRunner, want int) (*dockerPool, error) {
	root := filepath.Join(d.meta, "pool")
	// The engine binds the pool directories as root and the containers
	// reach them through the bind: nobody on the host needs to find them.
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("sandbox: docker pool directory: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &dockerPool{d: d, want: want, root: root, ctx: ctx, cancel: cancel,
		idle: map[string][]*dockerCtr{}, making: map[string]int{}, failed: map[string]time.Time{}}, nil
}

// take returns a ready container for resource set k, or nil, and records k
// as the most recently used set (so the pool refills it).
func (p *dockerPool) take(k resKey) *dockerCtr {
	defer p.fill()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil
		}
		p.touch(k)
		q := p.idle[k.key]
		if len(q) == 0 {
			p.mu.Unlock()
			p.misses.Add(1)
			return nil
		}
		c := q[0]
		p.idle[k.key] = q[1:]
		p.mu.Unlock()
		// Only this goroutine holds c now.
		if serverAlive(c.conn) {
			p.hits.Add(1)
			return c
		}
		p.d.log.Warn("sandbox: docker pool container died while ready; removing it", "container", c.id)
		p.remove(c)
	}
}

// touch records k as the most recently used resource set. Call with p.mu.
func (p *dockerPool) touch(k resKey) {
	keys := []resKey{k}
	for _, x := range p.keys {
		if x.key != k.key && len(keys) < maxKeys {
			keys = append(keys, x)
		}
	}
	p.keys = keys
}

// shares splits want between the recent resource sets, newest first.
// Call with p.mu.
func (p *dockerPool) shares() map[string]int {
	s := map[string]int{}
	for i, k := range p.keys {
		s[k.key] = p.want / len(p.keys)
		if i < p.want%len(p.keys) {
			s[k.key]++
		}
	}
	return s
}

// fill removes ready containers beyond their resource set's share (a set
// no longer recent has none) and starts new ones, up to dockerFillers at
// once, where a set has fewer than its share ready or starting.
func (p *dockerPool) fill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	share := p.shares()
	var evict []*dockerCtr
	for key, q := range p.idle {
		for len(q) > share[key] {
			evict = append(evict, q[0])
			q = q[1:]
		}
		if len(q) == 0 {
			delete(p.idle, key)
		} else {
			p.idle[key] = q
		}
	}
	if len(evict) > 0 {
		p.wg.Go(func() {
			for _, c := range evict {
				p.remove(c)
			}
		})
	}
	starting := 0
	for _, n := range p.making {
		starting += n
	}
	for _, k := range p.keys {
		for starting < dockerFillers && len(p.idle[k.key])+p.making[k.key] < share[k.key] &&
			time.Since(p.failed[k.key]) > poolRetry {
			p.making[k.key]++
			starting++
			p.wg.Go(func() { p.startOne(k) })
		}
	}
}

// startOne starts a container for resource set k and adds it to the pool.
func (p *dockerPool) startOne(k resKey) {
	c, err := p.d.poolCtr(p.ctx, p.root, k)
	p.mu.Lock()
	p.making[k.key]--
	if err != nil {
		p.failed[k.key] = time.Now()
		p.mu.Unlock()
		if p.ctx.Err() == nil {
			p.d.log.Error("sandbox: docker pool container start failed", "err", err)
		}
		return
	}
	if p.closed {
		p.mu.Unlock()
		p.remove(c)
		return
	}
	p.idle[k.key] = append(p.idle[k.key], c)
	p.mu.Unlock()
	p.fill()
}

// remove removes a container no episode got, and its directory.
func (p *dockerPool) remove(c *dockerCtr) {
	p.d.discard(c)
	if err := os.RemoveAll(c.bound); err != nil {
		p.d.log.Warn("sandbox: docker pool directory", "dir", c.bound, "err", err)
	}
}

// counts returns how many containers are ready and how many starting.
func (p *dockerPool) counts() (ready, starting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, q := range p.idle {
		ready += len(q)
	}
	for _, n := range p.making {
		starting += n
	}
	return ready, starting
}

// close ends the starts under way and removes every container no episode
// got, with its directory.
func (p *dockerPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = map[string][]*dockerCtr{}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	var wg sync.WaitGroup
	for _, q := range idle {
		for _, c := range q {
			wg.Go(func() { p.remove(c) })
		}
	}
	wg.Wait()
}

// poolCtr creates and starts a container for the pool, with a new empty
// directory under root bound at /work, and waits until its server is
// ready. It has the limits of any episode's container (newCtr); only its
// CPU weight is low until then.
func (d *dockerRunner) poolCtr(ctx context.Context, root string, k resKey) (*dockerCtr, error) {
	dir := filepath.Join(root, fmt.Sprintf("w%d-%s", d.seq.Add(1), d.token))
	if err := d.makeWorkspace(dir); err != nil {
		return nil, err
	}
	// The create is not canceled by close: once the engine has made the
	// container, the worker must know its id to remove it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	c, err := d.newCtr(cctx, dir, k.mounts, k.key,
		map[string]string{labelPool: d.token, labelWorker: d.worker, labelWorkRoot: d.root}, poolShares)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	fail := func(err error) (*dockerCtr, error) {
		d.discard(c)
		_ = os.RemoveAll(dir)
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, readyTimeout+time.Minute)
	defer cancel()
	if _, err := d.start(sctx, c); err != nil {
		return fail(err)
	}
	if _, err := d.cli.ContainerUpdate(sctx, c.id, client.ContainerUpdateOptions{
		Resources: &container.Resources{CPUShares: 1024}}); err != nil {
		return fail(fmt.Errorf("docker update: %w", err))
	}
	return c, nil
}

// sweepPool removes any container left with this runner's pool label (one
// the engine made after a create gave up waiting for it).
func (d *dockerRunner) sweepPool() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", labelPool+"="+d.token)})
	if err != nil {
		d.log.Warn("sandbox: docker pool sweep", "err", err)
		return
	}
	for _, s := range res.Items {
		d.removeID(s.ID)
	}
}

// adopt makes a pooled container episode's: its directory becomes the
// workspace at path.
func (d *dockerRunner) adopt(episode, path string, c *dockerCtr) error {
	if err := os.Rename(c.bound, path); err != nil {
		d.discard(c)
		_ = os.RemoveAll(c.bound)
		return fmt.Errorf("docker pool: %w", err)
	}
	d.mu.Lock()
	old := d.ctrs[episode]
	d.ctrs[episode] = c
	d.mu.Unlock()
	if old != nil {
		d.discard(old)
	}
	return nil
}

// serverAlive reports whether a ready fork server's connection is still
// open: a server sends nothing between its ready message and a request,
// so anything to read (EOF included) means it is gone.
func serverAlive(conn *net.UnixConn) bool {
	if conn == nil {
		return false
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 0)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			alive = err == nil && n == 0
			return
		}
	})
	return alive
}

func (p *dockerPool) stats() (hits, misses int64, ready int) {
	return snapshotPool(&p.poolCounts, &p.mu, p.idle)
}
