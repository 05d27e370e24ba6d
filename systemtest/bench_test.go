package systemtest

// Pipeline benchmarks, run by `make bench`. They are benchmarks, not timed
// tests: they assert nothing about speed, they measure and print a table
// (and report the figures as benchmark metrics). Each runs its workload once,
// whatever b.N; the figures inside one benchmark are measured side by side
// on the same machine, so their ratios are what to compare across machines.
//
//   - BenchmarkPipelineOverhead: in-process services, an instant fake model
//     and multi-turn episodes; per-turn pipeline overhead from the
//     JetStream timestamps of the actions and observations (see below).
//   - BenchmarkSandboxScaling: external nats-server and service binaries,
//     1, 2 and 4 sandbox-worker processes (one action at a time each) on
//     episodes whose code sleeps 200 ms.
//   - BenchmarkConcurrentEpisodes: external processes, 1,000 episodes in
//     flight against a fake model with 1 s latency; peak RSS (VmHWM) of the
//     llm-worker, verifier and dispatcher.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// benchFlags are run flags with their defaults, like baseFlags for tests.
func benchFlags(b *testing.B, work string) *cli.RunFlags {
	b.Helper()
	var f cli.RunFlags
	fs := newTestFlagSet()
	f.Register(fs)
	if err := fs.Parse(nil); err != nil {
		b.Fatal(err)
	}
	f.Data = tasks.DataRoot()
	f.Library = filepath.Join(work, "library")
	f.Store = filepath.Join(work, "store")
	f.State = filepath.Join(work, "state")
	f.Quiet, f.LogLevel = true, "error"
	if err := os.MkdirAll(f.Library, 0o755); err != nil {
		b.Fatal(err)
	}
	return &f
}

// benchWork is a work directory the sandbox user (uid 65534) can reach,
// which b.TempDir (0700 parent) is not.
func benchWork(b *testing.B) string {
	b.Helper()
	work, err := os.MkdirTemp("", "medgym-bench-")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Chmod(work, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(work) })
	return work
}

// script is a fake model that plays replies in order, answering at once.
func script(replies ...string) *httptest.Server {
	return httptest.NewServer(fakellm.New(fakellm.Config{Policy: "script", Script: replies, Seed: 1, Model: "fake"}))
}

func codeReply(code string) string {
	b, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": code}})
	return string(b)
}

const answerReply = `{"action": "answer", "params": {"answer": "0"}}`

// quantile returns the q-quantile (nearest rank) of sorted xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs)) + 0.5)
	return xs[min(max(i-1, 0), len(xs)-1)]
}

// throughput is episodes per second from the first episode's start to the
// last one's end (the llm-worker's clock), so service start-up is left out.
func throughput(rows []parquet.Row) float64 {
	if len(rows) == 0 {
		return 0
	}
	first, last := rows[0].StartedAt, rows[0].FinishedAt
	for _, r := range rows {
		if r.StartedAt.Before(first) {
			first = r.StartedAt
		}
		if r.FinishedAt.After(last) {
			last = r.FinishedAt
		}
	}
	return float64(len(rows)) / last.Sub(first).Seconds()
}

// publishTimes reads the JetStream timestamp of the first message of every
// (episode, turn) on subject.
func publishTimes(ctx context.Context, b *testing.B, conn *bus.Conn, stream, subject string) map[string]time.Time {
	b.Helper()
	follow, err := bus.Follow[struct{ Ref schemas.EpisodeRef }](ctx, conn, stream, subject)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]time.Time{}
	for m, err := range follow.Available() {
		if err != nil {
			b.Fatal(err)
		}
		k := fmt.Sprintf("%s/%d", m.Value.Ref.EpisodeID, m.Value.Ref.Turn)
		if _, ok := out[k]; !ok {
			out[k] = m.Time
		}
	}
	return out
}

// BenchmarkPipelineOverhead measures what the pipeline adds to a turn, with
// an instant fake model and episodes of 5 code runs then an answer.
//
// For turn i of an episode, with t(x) the JetStream timestamp of message x:
//
//	sandbox side = t(observation i) − t(action i) − exec duration reported by the sandbox
//	return path  = t(action i+1) − t(observation i) − model latency of turn i+1
//	overhead     = sandbox side + return path
//
// The sandbox side is the sandbox-worker's delivery, workspace and process
// set-up; the return path is the verifier's check of the run, the
// llm-worker's state save, prompt and parse, and the bus hops.
//
// Sub-benchmarks: the warm pool (--warm, one ready server per episode in
// flight) at 1 and at 4 episodes in flight, and cold bubblewrap at 4 for
// scale. The exec duration the sandbox reports is whole milliseconds
// (ExecResult.DurationMS, truncated), so the sandbox side overstates by
// 0-1 ms, 0.5 ms on average. The model time left out of the return path
// is the fake model's own handler time (timedModel), to the microsecond.
func BenchmarkPipelineOverhead(b *testing.B) {
	for _, c := range []struct {
		name                string
		warm, inFlight, eps int
	}{{"warm/inflight=1", 1, 1, 12}, {"warm/inflight=4", 4, 4, 24}, {"cold/inflight=4", 0, 4, 24}} {
		b.Run(c.name, func(b *testing.B) { pipelineOverhead(b, c.warm, c.inFlight, c.eps) })
	}
}

func pipelineOverhead(b *testing.B, warm, inFlight, episodes int) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	work := benchWork(b)
	f := benchFlags(b, work)
	model := &timedModel{h: fakellm.New(fakellm.Config{Policy: "script", Seed: 1, Model: "fake", Script: []string{
		codeReply("print(1)"), codeReply("print(2)"), codeReply("print(3)"), codeReply("print(4)"), codeReply("print(5)"), answerReply}})}
	llm := httptest.NewServer(model)
	defer llm.Close()
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(work, "js")})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	logger := cli.NewLogger(io.Discard, "error")
	conn, err := bus.Connect(ctx, ns.ClientURL(), "bench", logger)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		b.Fatal(err)
	}
	f.Sandbox.Concurrency = 4
	f.Sandbox.Sandbox.Warm = warm
	svcCtx, stop := context.WithCancel(ctx)
	wait := cli.StartServices(svcCtx, conn, &f.ServiceFlags, "", logger)
	defer func() { stop(); _ = wait() }()

	f.NATS, f.Policy, f.LLMURL, f.Model = ns.ClientURL(), "openai", llm.URL+"/v1", "fake"
	f.Limit, f.RunID, f.MaxInFlight, f.MaxTurns = episodes, "bench-overhead", inFlight, 8
	spec, err := f.Spec()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	rows := readRunTB(ctx, b, f.Store, f.RunID)
	actions := publishTimes(ctx, b, conn, schemas.StreamActions, schemas.ActionRequested.For(f.RunID))
	obs := publishTimes(ctx, b, conn, schemas.StreamObservations, schemas.ObservationProduced.For(f.RunID))
	checked := publishTimes(ctx, b, conn, schemas.StreamChecks, schemas.ObservationChecked.For(f.RunID))
	var side, ret, total, sandbox, verify, llmHop []float64
	for _, r := range rows {
		for i := 0; i+1 < len(r.Turns); i++ {
			ta, ok1 := actions[fmt.Sprintf("%s/%d", r.EpisodeID, i)]
			to, ok2 := obs[fmt.Sprintf("%s/%d", r.EpisodeID, i)]
			tn, ok3 := actions[fmt.Sprintf("%s/%d", r.EpisodeID, i+1)]
			if !ok1 || !ok2 || !ok3 {
				continue
			}
			s := to.Sub(ta).Seconds()*1000 - float64(r.Turns[i].DurationMS)
			mt := model.tookMS(r.EpisodeID, i+1)
			p := tn.Sub(to).Seconds()*1000 - mt
			side, ret, total = append(side, s), append(ret, p), append(total, s+p)
			sandbox = append(sandbox, float64(r.Turns[i].DurationMS))
			// The return path's two legs: the verifier (observation to
			// checked observation) and the llm-worker (to the next action).
			if tc, ok := checked[fmt.Sprintf("%s/%d", r.EpisodeID, i)]; ok {
				verify = append(verify, tc.Sub(to).Seconds()*1000)
				llmHop = append(llmHop, tn.Sub(tc).Seconds()*1000-mt)
			}
		}
	}
	if len(total) == 0 {
		b.Fatal("no turn pairs measured")
	}
	for _, xs := range [][]float64{side, ret, total, sandbox, verify, llmHop} {
		slices.Sort(xs)
	}
	eps := throughput(rows)
	fmt.Printf("\npipeline overhead per turn (ms), %d turns of %d episodes, instant fake model, %d episodes in flight, sandbox concurrency 4, warm pool %d\n", len(total), len(rows), inFlight, warm)
	fmt.Printf("%-34s %8s %8s %8s\n", "", "p50", "p95", "p95/p50")
	for _, l := range []struct {
		name string
		xs   []float64
	}{{"sandbox side (minus exec time)", side}, {"return path (minus model time)", ret},
		{"  verifier: observation to checked", verify}, {"  llm-worker: checked to next action", llmHop},
		{"overhead (sum)", total}, {"sandbox exec time (for scale)", sandbox}} {
		p50, p95 := quantile(l.xs, 0.5), quantile(l.xs, 0.95)
		fmt.Printf("%-34s %8.1f %8.1f %8.2f\n", l.name, p50, p95, p95/max(p50, 1e-9))
	}
	fmt.Printf("episodes/s: %.2f (6 turns, 5 sandbox runs each)\n", eps)
	b.ReportMetric(quantile(side, 0.5), "sandbox-p50-ms")
	b.ReportMetric(quantile(ret, 0.5), "return-p50-ms")
	b.ReportMetric(quantile(total, 0.5), "overhead-p50-ms")
	b.ReportMetric(quantile(total, 0.95), "overhead-p95-ms")
	b.ReportMetric(eps, "episodes/s")
}

// timedModel serves a fake model and records how long its handler took
// for each (episode, turn): the model time the return path leaves out,
// to the microsecond (the trajectory's llm_latency_ms is whole
// milliseconds). The HTTP round trip to the model stays in the return path.
type timedModel struct {
	h    http.Handler
	mu   sync.Mutex
	took map[string]time.Duration
}

func (m *timedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		User     string `json:"user"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	turn := 0
	for _, msg := range req.Messages {
		if msg.Role == "assistant" {
			turn++
		}
	}
	begin := time.Now()
	m.h.ServeHTTP(w, r)
	m.mu.Lock()
	if m.took == nil {
		m.took = map[string]time.Duration{}
	}
	m.took[fmt.Sprintf("%s/%d", req.User, turn)] = time.Since(begin)
	m.mu.Unlock()
}

// tookMS is the model's time for an episode's turn, in milliseconds.
func (m *timedModel) tookMS(episode string, turn int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.took[fmt.Sprintf("%s/%d", episode, turn)].Seconds() * 1000
}

func readRunTB(ctx context.Context, b *testing.B, storeURL, runID string) []parquet.Row {
	b.Helper()
	st, err := store.Open(ctx, storeURL, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	rows, err := st.ReadRun(ctx, runID)
	if err != nil {
		b.Fatal(err)
	}
	return rows
}

// cluster is an external nats-server plus service processes.
type cluster struct {
	b     *testing.B
	work  string
	bin   string
	url   string
	data  string
	procs []*exec.Cmd
	log   *os.File
}

func newCluster(b *testing.B, work string) *cluster {
	b.Helper()
	return newClusterOn(b, work, "127.0.0.1")
}

// newClusterOn is newCluster with nats-server listening on host.
func newClusterOn(b *testing.B, work, host string) *cluster {
	b.Helper()
	natsBin := filepath.Join(toolsDir(), "nats-server")
	if _, err := os.Stat(natsBin); err != nil {
		b.Skipf("nats-server not found at %s (run scripts/setup.sh)", natsBin)
	}
	bin := filepath.Join(work, "bin")
	root := repoRoot(b)
	for _, s := range []string{"dispatcher", "llm-worker", "sandbox-worker", "verifier"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, s), "./services/"+s)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", s, err, out)
		}
	}
	logf, err := os.Create(filepath.Join(work, "services.log"))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	c := &cluster{b: b, work: work, bin: bin, url: "nats://" + addr, data: tasks.DataRoot(), log: logf}
	b.Cleanup(c.stopAll)
	c.start(natsBin, "-js", "-a", host, "-p", port, "-sd", filepath.Join(work, "nats"))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("nats-server did not start")
		}
	}
	return c
}

func toolsDir() string {
	if d := os.Getenv("MEDGYM_TOOLS"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "medgym", "bin")
}

// start runs a process (a service binary name or a path) that dies with the benchmark.
func (c *cluster) start(name string, args ...string) *exec.Cmd {
	c.b.Helper()
	if !filepath.IsAbs(name) {
		name = filepath.Join(c.bin, name)
		args = append([]string{"--nats", c.url, "--metrics", ""}, args...)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = c.log, c.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.b.Fatalf("start %s: %v", name, err)
	}
	c.procs = append(c.procs, cmd)
	return cmd
}

func stopProc(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// stopAll stops the services, then nats-server (started first).
func (c *cluster) stopAll() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		stopProc(c.procs[i])
	}
	c.procs = nil
	_ = c.log.Close()
}

func (c *cluster) sandboxWorker(i, conc int) *exec.Cmd {
	wr := filepath.Join(c.work, fmt.Sprintf("sandboxes-%d", i))
	_ = os.MkdirAll(wr, 0o755)
	agent := tasks.AgentTree(filepath.Join(c.work, "library"))
	_ = os.MkdirAll(agent, 0o755)
	return c.start("sandbox-worker", "--agent-tree", agent, "--work-root", wr,
		"--concurrency", strconv.Itoa(conc))
}

// BenchmarkSandboxScaling runs the same sandbox-bound workload (each
// episode: one code run that sleeps 200 ms, then an answer) with 1, 2 and 4
// sandbox-worker processes, each running one action at a time, and prints
// episodes/s for each and the ratios to one worker.
func BenchmarkSandboxScaling(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	work := benchWork(b)
	f := benchFlags(b, work)
	c := newCluster(b, work)
	c.start("dispatcher", "--data", c.data, "--library", f.Library)
	c.start("llm-worker", "--data", c.data, "--library", f.Library, "--concurrency", "64")
	c.start("verifier", "--data", c.data, "--library", f.Library, "--store", f.Store)
	llm := script(codeReply("import time\ntime.sleep(0.2)\nprint(1)"), answerReply)
	defer llm.Close()
	f.NATS, f.Policy, f.LLMURL, f.Model = c.url, "openai", llm.URL+"/v1", "fake"
	f.Limit, f.MaxInFlight = 32, 32
	workers := []int{1, 2, 4}
	eps := make([]float64, len(workers))
	b.ResetTimer()
	for i, n := range workers {
		var ws []*exec.Cmd
		for j := range n {
			ws = append(ws, c.sandboxWorker(10*i+j, 1))
		}
		time.Sleep(time.Second) // let the workers connect
		f.RunID = fmt.Sprintf("bench-scale-%d", n)
		spec, err := f.Spec()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
			b.Fatal(err)
		}
		eps[i] = throughput(readRunTB(ctx, b, f.Store, f.RunID))
		for _, w := range ws {
			stopProc(w)
		}
	}
	b.StopTimer()
	fmt.Printf("\nsandbox-bound throughput: %d episodes per setting, each one 200 ms code run + an answer, 1 action at a time per worker\n", f.Limit)
	fmt.Printf("%-16s %12s %10s %10s\n", "sandbox workers", "episodes/s", "vs 1", "ideal")
	for i, n := range workers {
		fmt.Printf("%-16d %12.2f %10.2f %10d\n", n, eps[i], eps[i]/eps[0], n)
		b.ReportMetric(eps[i], fmt.Sprintf("episodes/s-%dw", n))
	}
}

// procStatus reads a kB field (VmRSS, VmHWM) of /proc/<pid>/status, in MiB.
func procStatus(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkConcurrentEpisodes holds 1,000 episodes in flight against a fake
// model that takes 1 s per reply (each episode: one reply, an answer), and
// reports the peak RSS of each service process.
func BenchmarkConcurrentEpisodes(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	work := benchWork(b)
	f := benchFlags(b, work)
	c := newCluster(b, work)
	procs := map[string]*exec.Cmd{
		"dispatcher": c.start("dispatcher", "--data", c.data, "--library", f.Library),
		"llm-worker": c.start("llm-worker", "--data", c.data, "--library", f.Library, "--concurrency", "1000",
			"--llm-max-concurrent", "1000", "--ack-wait", "30s"),
		"verifier": c.start("verifier", "--data", c.data, "--library", f.Library, "--store", f.Store, "--concurrency", "64"),
	}
	c.sandboxWorker(0, 2)
	var inflight, peak, firstReq, lastReq atomic.Int64
	fake := fakellm.New(fakellm.Config{Policy: "script", Script: []string{answerReply}, Seed: 1, Model: "fake",
		LatencyMean: time.Second})
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UnixNano()
		firstReq.CompareAndSwap(0, now)
		for l := lastReq.Load(); now > l && !lastReq.CompareAndSwap(l, now); l = lastReq.Load() {
		}
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		defer inflight.Add(-1)
		fake.ServeHTTP(w, r)
	}))
	defer llm.Close()
	time.Sleep(time.Second)
	idle := map[string]float64{}
	for name, p := range procs {
		idle[name] = procStatus(p.Process.Pid, "VmRSS")
	}
	f.NATS, f.Policy, f.LLMURL, f.Model = c.url, "openai", llm.URL+"/v1", "fake"
	f.Limit, f.Samples, f.MaxInFlight, f.RunID = 500, 2, 1000, "bench-1000"
	spec, err := f.Spec()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	wall := time.Since(start)
	b.StopTimer()
	rows := readRunTB(ctx, b, f.Store, f.RunID)
	fmt.Printf("\n1,000 concurrent episodes, fake model with 1 s latency: %d episodes (%d correct/%d infra), wall %.1f s incl. submit and read-back, %.1f episodes/s (first start to last end), peak %d model requests in flight\n",
		res.Total, res.Outcomes[schemas.OutcomeCorrect], res.Outcomes[schemas.OutcomeInfraFailure], wall.Seconds(), throughput(rows), peak.Load())
	// With a fixed 1 s model latency, the first request ends 1 s after it
	// began: all 1,000 are in flight at once only if the pipeline admits
	// them (dispatch, the llm-worker's start and state save, the prompt)
	// within that second.
	ramp := time.Duration(lastReq.Load() - firstReq.Load())
	fmt.Printf("model requests began over %.2f s (%.0f episodes admitted per second); with a 1 s model latency all are in flight at once only under 1 s\n",
		ramp.Seconds(), float64(res.Total)/max(ramp.Seconds(), 1e-9))
	b.ReportMetric(ramp.Seconds(), "admission-s")
	fmt.Printf("%-12s %14s %14s %18s\n", "process", "idle RSS MiB", "peak RSS MiB", "KiB per episode")
	for _, name := range []string{"llm-worker", "verifier", "dispatcher"} {
		hwm := procStatus(procs[name].Process.Pid, "VmHWM")
		per := (hwm - idle[name]) * 1024 / 1000
		fmt.Printf("%-12s %14.1f %14.1f %18.1f\n", name, idle[name], hwm, per)
		b.ReportMetric(hwm, "peak-MiB-"+name)
	}
	b.ReportMetric(float64(peak.Load()), "peak-model-requests")
}
