package sandbox

import (
	"sync"
	"sync/atomic"
)

// Stats is what a Sandbox is and has done, for metrics and logs.
type Stats struct {
	Backend string // BackendBwrap or BackendDocker
	// Limits says what bounds a run's memory, processes and CPU: "cgroup-v1"
	// or "cgroup-v2" (bwrap with cgroups), "rlimits" (bwrap without: shared
	// memory and CPU quota are then unbounded), "docker" (the engine's).
	Limits  string
	Seccomp bool
	// DiskQuota says what bounds a workspace's size: DiskQuotaProject (the
	// kernel's project quotas), DiskQuotaWatcher or DiskQuotaOff.
	DiskQuota string
	// Actions counts the results returned by Execute, by ExecResult status.
	Actions map[string]int64
	// PoolHits and PoolMisses count the new episodes that found a ready
	// fork server (warm pool) or container (docker pool), or found none.
	// PoolReady is how many are ready now. All 0 without a pool.
	PoolHits, PoolMisses int64
	PoolReady            int
	// Episodes is the number of live workspaces.
	Episodes int
	// Replayed counts earlier actions of episodes run again to bring a
	// workspace up to date (ActionRequest.Replay): the cost of turns
	// spreading over workers.
	Replayed int64
}

// pooled is a runner with a pool of ready sandboxes.
type pooled interface {
	poolStats() (hits, misses int64, ready int)
}

// poolCounts counts the new episodes a pool gave a ready fork server or
// container (hits), and those that found none (misses).
type poolCounts struct{ hits, misses atomic.Int64 }

// snapshotPool returns a pool's counts and how many of its sandboxes are
// ready in idle, which mu guards.
func snapshotPool[T any](c *poolCounts, mu *sync.Mutex, idle map[string][]T) (hits, misses int64, ready int) {
	mu.Lock()
	for _, q := range idle {
		ready += len(q)
	}
	mu.Unlock()
	return c.hits.Load(), c.misses.Load(), ready
}

// counts is a Sandbox's tally of results by status.
type counts struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counts) add(status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[status]++
}

func (c *counts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// Stats returns a snapshot of the sandbox's configuration and counters.
func (s *Sandbox) Stats() Stats {
	st := Stats{Backend: s.cfg.Backend, Limits: "docker", Seccomp: !s.cfg.DisableSeccomp,
		DiskQuota: s.diskQuota, Actions: s.results.snapshot(), Replayed: s.replayed.Load()}
	if s.cfg.Backend == BackendBwrap {
		st.Limits = "rlimits"
		if s.cgParent != nil {
			st.Limits = "cgroup-" + s.cgParent.version()
		}
	}
	if p, ok := s.run.(pooled); ok {
		st.PoolHits, st.PoolMisses, st.PoolReady = p.poolStats()
	}
	s.mu.Lock()
	st.Episodes = len(s.episodes)
	s.mu.Unlock()
	return st
}
