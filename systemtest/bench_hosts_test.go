package systemtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// startIn runs a service binary in network namespace ns (the netLab's
// hosts), like cluster.start.
func (c *cluster) startIn(ns, name string, args ...string) *exec.Cmd {
	c.b.Helper()
	args = append([]string{"netns", "exec", ns, filepath.Join(c.bin, name), "--nats", c.url, "--metrics", ""}, args...)
	cmd := exec.Command("ip", args...) // ip execs the binary: cmd's pid is the service's
	cmd.Stdout, cmd.Stderr = c.log, c.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.b.Fatalf("start %s in %s: %v", name, ns, err)
	}
	c.procs = append(c.procs, cmd)
	return cmd
}

// cpuMeter measures the CPU time of this process and everything it
// starts, sandboxes included (a process's own times miss them: bwrap exits
// without reaping the sandbox's init): on cgroup v1 it moves this process
// into a cpuacct cgroup of its own, which its children inherit (the
// sandbox-worker makes its sandboxes' cgroups in the memory, pids and cpu
// hierarchies only); on v2 it reads this process's cgroup's cpu.stat. It
// returns nil where neither works.
func cpuMeter(b *testing.B) func() float64 {
	b.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+parts[1]+",", ",cpuacct,"):
			root := filepath.Join("/sys/fs/cgroup", parts[1])
			if _, err := os.Stat(root); err != nil {
				root = "/sys/fs/cgroup/cpuacct"
			}
			orig := filepath.Join(root, parts[2])
			dir := filepath.Join(orig, fmt.Sprintf("medgym-bench-%d", os.Getpid()))
			if os.Mkdir(dir, 0o755) != nil || os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644) != nil {
				return nil
			}
			b.Cleanup(func() {
				_ = os.WriteFile(filepath.Join(orig, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
				_ = os.Remove(dir)
			})
			return func() float64 {
				v, _ := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
				ns, _ := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
				return ns / 1e9
			}
		case parts[0] == "0" && parts[1] == "":
			stat := filepath.Join("/sys/fs/cgroup", parts[2], "cpu.stat")
			if _, err := os.Stat(stat); err != nil {
				continue
			}
			return func() float64 {
				v, _ := os.ReadFile(stat)
				for _, l := range strings.Split(string(v), "\n") {
					if u, ok := strings.CutPrefix(l, "usage_usec "); ok {
						us, _ := strconv.ParseFloat(u, 64)
						return us / 1e6
					}
				}
				return 0
			}
		}
	}
	return nil
}

// pandasCode is a CPU-bound action for a cold interpreter: the pandas
// import dominates.
const pandasCode = "import pandas as pd\nprint(pd.DataFrame({'g': [1, 2, 1]}).groupby('g').size().to_dict())"

// BenchmarkScalingAcrossHosts (issue 17) scales workers that each run on a
// host of their own (a network namespace on a bridge: the cluster test's
// netLab; run as root) with each worker's --concurrency fixed, against one
// nats-server on the bridge, the dispatcher and verifier in the
// benchmark's own namespace:
//
//   - llm-bound: 1, 2, 4, 8 llm-workers (--concurrency 8 each) against a
//     fake model with a fixed 1 s latency; every episode answers at once
//     (48 episodes per worker, so each setting runs about 6 s). Linear is
//     8 episodes/s per worker.
//   - sandbox-bound: 1, 2, 4 sandbox-workers (--concurrency 1 each, cold
//     bubblewrap), an instant model, and episodes of one code run that
//     sleeps 200 ms, then an answer (12 per worker); then the same with a
//     CPU-bound code run instead, a pandas import (6 per worker).
//
// For each setting it prints episodes/s, the ratio to one worker, that
// ratio over the number of workers (1.0 is linear), and the CPU time all
// of the benchmark's processes used (services, sandboxes, nats-server and
// this process: the fake model and the run client) per wall second: the
// cores they kept busy. Where that figure stops growing with the workers,
// the machine's cores (or the share of them it gets) are saturated.
func BenchmarkScalingAcrossHosts(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
	defer cancel()
	lab := newNetLab(b)
	cpuNow := cpuMeter(b) // before any process starts: they inherit its cgroup
	if cpuNow == nil {
		cpuNow = func() float64 { return 0 }
		fmt.Println("no cpuacct cgroup here: the cores-busy column reads 0")
	}
	work := benchWork(b)
	f := benchFlags(b, work)
	c := newClusterOn(b, work, lab.subnet+".1")
	c.start("dispatcher", "--data", c.data, "--library", f.Library)
	c.start("verifier", "--data", c.data, "--library", f.Library, "--store", f.Store, "--concurrency", "64")

	// The models listen on the bridge, where every host reaches them.
	slow := fakellm.New(fakellm.Config{Policy: "script", Script: []string{answerReply}, Seed: 1, Model: "fake", LatencyMean: time.Second})
	sleepy := fakellm.New(fakellm.Config{Policy: "script", Script: []string{codeReply("import time\ntime.sleep(0.2)\nprint(1)"), answerReply}, Seed: 1, Model: "fake"})
	pandas := fakellm.New(fakellm.Config{Policy: "script", Script: []string{codeReply(pandasCode), answerReply}, Seed: 1, Model: "fake"})
	serve := func(h http.Handler) string {
		ln, err := net.Listen("tcp", lab.subnet+".1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		b.Cleanup(func() { _ = srv.Close() })
		return "http://" + ln.Addr().String() + "/v1"
	}
	slowURL, sleepyURL, pandasURL := serve(slow), serve(sleepy), serve(pandas)
	f.NATS, f.Policy, f.Model = c.url, "openai", "fake"

	hosts := map[string]string{}
	host := func(name string) string {
		if ns, ok := hosts[name]; ok {
			return ns
		}
		hosts[name] = lab.host(name, 10+len(hosts))
		return hosts[name]
	}
	type result struct {
		workers    int
		eps, cores float64
		episodes   int
		cpuPerEp   float64
	}
	// measure runs one setting: the workers started by startWorkers, a run
	// of n episodes, the CPU its processes used.
	measure := func(name string, workers, n int, startWorkers func() []*exec.Cmd) result {
		ws := startWorkers()
		time.Sleep(2 * time.Second) // let the workers connect and fill their pools
		cpu0 := cpuNow()
		f.RunID, f.Limit, f.MaxInFlight = fmt.Sprintf("bench-hosts-%s-%d", name, workers), n, 4*n
		spec, err := f.Spec()
		if err != nil {
			b.Fatal(err)
		}
		begin := time.Now()
		if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
			b.Fatal(err)
		}
		wall := time.Since(begin).Seconds()
		cpu := cpuNow() - cpu0
		for _, w := range ws {
			stopProc(w)
		}
		rows := readRunTB(ctx, b, f.Store, f.RunID)
		if len(rows) != n {
			b.Fatalf("%s with %d workers: %d of %d episodes stored", name, workers, len(rows), n)
		}
		return result{workers: workers, eps: throughput(rows), cores: cpu / wall, episodes: n, cpuPerEp: cpu / float64(n)}
	}
	table := func(title, unit string, rs []result, linear float64) {
		fmt.Printf("\n%s\n", title)
		fmt.Printf("%-8s %9s %11s %8s %14s %13s %14s\n", "workers", "episodes", "episodes/s", "vs 1", "vs 1 / linear", "cores busy", "CPU-ms/episode")
		for _, r := range rs {
			ratio := r.eps / rs[0].eps
			fmt.Printf("%-8d %9d %11.2f %8.2f %14.2f %13.2f %14.0f\n", r.workers, r.episodes, r.eps, ratio, ratio/float64(r.workers), r.cores, r.cpuPerEp*1000)
			b.ReportMetric(r.eps, fmt.Sprintf("%s-episodes/s-%dw", unit, r.workers))
			b.ReportMetric(r.cores, fmt.Sprintf("%s-cores-%dw", unit, r.workers))
		}
		if linear > 0 {
			fmt.Printf("(linear: %.0f episodes/s per worker)\n", linear)
		}
	}

	// llm-bound: one sandbox-worker (unused: no episode runs code).
	agent := tasks.AgentTree(f.Library)
	if err := os.MkdirAll(agent, 0o755); err != nil {
		b.Fatal(err)
	}
	const llmConc = 8
	var sandboxSetting func(name string, n, episodes int) result
	f.LLMURL = slowURL
	var llm []result
	b.ResetTimer()
	for _, n := range []int{1, 2, 4, 8} {
		llm = append(llm, measure("llm", n, 48*n, func() []*exec.Cmd {
			var ws []*exec.Cmd
			for i := range n {
				ws = append(ws, c.startIn(host(fmt.Sprintf("l%d", i)), "llm-worker", "--data", c.data, "--library", f.Library,
					"--concurrency", strconv.Itoa(llmConc), "--llm-max-concurrent", strconv.Itoa(llmConc)))
			}
			return ws
		}))
	}

	// sandbox-bound: one llm-worker with room for every episode in flight;
	// code that sleeps (the sandboxes wait), then code that imports pandas
	// (they compute: a cold interpreter's pandas import is CPU-bound).
	sandboxBound := func(name, url string, perWorker int) []result {
		f.LLMURL = url
		var rs []result
		for _, n := range []int{1, 2, 4} {
			rs = append(rs, sandboxSetting(name, n, perWorker*n))
		}
		return rs
	}
	sandboxSetting = func(name string, n, episodes int) result {
		return measure(name, n, episodes, func() []*exec.Cmd {
			ws := []*exec.Cmd{c.startIn(host("l0"), "llm-worker", "--data", c.data, "--library", f.Library,
				"--concurrency", "64", "--llm-max-concurrent", "64")}
			for i := range n {
				wr := filepath.Join(work, fmt.Sprintf("sandboxes-%d-%d", n, i))
				if err := os.MkdirAll(wr, 0o755); err != nil {
					b.Fatal(err)
				}
				ws = append(ws, c.startIn(host(fmt.Sprintf("s%d", i)), "sandbox-worker", "--agent-tree", agent, "--work-root", wr,
					"--concurrency", "1"))
			}
			return ws
		})
	}
	sb := sandboxBound("sandbox", sleepyURL, 12)
	sbPandas := sandboxBound("pandas", pandasURL, 6)
	b.StopTimer()
	table(fmt.Sprintf("llm-bound, workers on hosts of their own: --concurrency %d each, fake model with a fixed 1 s latency, every episode answers at once", llmConc), "llm", llm, llmConc)
	table("sandbox-bound, workers on hosts of their own: --concurrency 1 each, cold bubblewrap, one 200 ms code run + an answer per episode", "sandbox", sb, 0)
	table("sandbox-bound and CPU-bound: the same, with one code run that imports pandas (cold) per episode", "pandas", sbPandas, 0)
	fmt.Printf("machine: %d CPUs (runtime.NumCPU)\n", runtime.NumCPU())
}
