package sandboxworker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
)

// sandboxCollector exports a Sandbox's Stats on each scrape.
type sandboxCollector struct {
	sb                                        *sandbox.Sandbox
	info, actions, pool, ready, eps, replayed *prometheus.Desc
}

func newSandboxCollector(sb *sandbox.Sandbox) *sandboxCollector {
	return &sandboxCollector{sb: sb,
		info: prometheus.NewDesc("medgym_sandbox_info",
			"The sandbox's backend, what bounds a run's memory/processes/CPU (cgroup-v1, cgroup-v2, rlimits, docker), whether seccomp is on and what bounds a workspace's size (project, watcher, off); always 1.",
			[]string{"backend", "limits", "seccomp", "disk_quota"}, nil),
		actions: prometheus.NewDesc("medgym_sandbox_actions_total",
			"Actions executed, by result status (ok, error, timeout, killed, sandbox_error, info).", []string{"status"}, nil),
		pool: prometheus.NewDesc("medgym_sandbox_pool_episodes_total",
			"New episodes that found a ready fork server or container (hit) or none (miss).", []string{"result"}, nil),
		ready: prometheus.NewDesc("medgym_sandbox_pool_ready",
			"Fork servers or containers started and ready for new episodes.", nil, nil),
		eps: prometheus.NewDesc("medgym_sandbox_episodes",
			"Episodes with a live workspace on this worker.", nil, nil),
		replayed: prometheus.NewDesc("medgym_sandbox_replayed_actions_total",
			"Earlier actions of episodes run again to bring this worker's workspace up to date (turns that other workers ran).", nil, nil),
	}
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.actions, c.pool, c.ready, c.eps, c.replayed} {
		ch <- d
	}
}

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.sb.Stats()
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, st.Backend, st.Limits, strconv.FormatBool(st.Seccomp), st.DiskQuota)
	for status, n := range st.Actions {
		ch <- prometheus.MustNewConstMetric(c.actions, prometheus.CounterValue, float64(n), status)
	}
	ch <- prometheus.MustNewConstMetric(c.pool, prometheus.CounterValue, float64(st.PoolHits), "hit")
	ch <- prometheus.MustNewConstMetric(c.pool, prometheus.CounterValue, float64(st.PoolMisses), "miss")
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(st.PoolReady))
	ch <- prometheus.MustNewConstMetric(c.eps, prometheus.GaugeValue, float64(st.Episodes))
	ch <- prometheus.MustNewConstMetric(c.replayed, prometheus.CounterValue, float64(st.Replayed))
}
