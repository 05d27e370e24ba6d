package systemtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// repoRoot is the directory holding go.work.
func repoRoot(t testing.TB) string {
	t.Helper()
	d := tasks.RepoRoot()
	if d == "" {
		t.Fatal("no go.work above the test directory")
	}
	return d
}

// natsServerBinary finds the nats-server v2.15 built by scripts/setup.sh.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MEDGYM_TOOLS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "medgym", "bin")
	}
	p := filepath.Join(dir, "nats-server")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server not found at %s: run scripts/setup.sh", p)
		}
		t.Skipf("nats-server not found at %s (run scripts/setup.sh)", p)
	}
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// built holds the service binaries built so far, once per test binary.
var built struct {
	sync.Mutex
	dir  string
	errs map[string]error // service → its build's error (nil: built)
}

// buildBinary builds one service's binary (once per test binary) and
// returns its path.
func buildBinary(t *testing.T, service string) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "medgym-bin-")
		if err != nil {
			t.Fatal(err)
		}
		built.dir, built.errs = dir, map[string]error{}
	}
	err, ok := built.errs[service]
	if !ok {
		cmd := exec.Command("go", "build", "-o", filepath.Join(built.dir, service), "./services/"+service)
		cmd.Dir = repoRoot(t)
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("build %s: %v\n%s", service, berr, out)
		}
		built.errs[service] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(built.dir, service)
}

// buildBinaries builds every service binary and returns their directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	var bin string
	for _, s := range []string{"dispatcher", "llm-worker", "sandbox-worker", "verifier"} {
		bin = filepath.Dir(buildBinary(t, s))
	}
	return bin
}

// proc is a service process the test can kill and restart.
type proc struct {
	t      *testing.T
	name   string
	args   []string
	log    *os.File
	onExit func(name string, err error)

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	killing bool
}

func (p *proc) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Errorf("start %s: %v", p.name, err)
		return
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.killing = cmd, exited, false
	go func() {
		err := cmd.Wait()
		close(exited)
		p.mu.Lock()
		expected := p.killing || p.cmd != cmd
		p.mu.Unlock()
		if !expected && p.onExit != nil {
			p.onExit(p.name, err)
		}
	}()
}

// signal sends sig and waits up to d for the process to exit.
func (p *proc) signal(sig syscall.Signal, d time.Duration) {
	p.mu.Lock()
	p.killing = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// send sends sig to the running process without waiting (SIGSTOP and
// SIGCONT pause and resume it).
func (p *proc) send(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// pid is the running process's id (0 before it starts).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) kill() { p.signal(syscall.SIGKILL, 5*time.Second) }
func (p *proc) stop() { p.signal(syscall.SIGTERM, 15*time.Second) }

// procCluster is an external nats-server and every medgym service, each
// its own process (two llm-workers and two sandbox-workers, so one of each
// can die), sharing a work directory the sandbox user can reach, one log
// file, one store and an empty task library (medcalcbench needs none).
type procCluster struct {
	t       *testing.T
	work    string
	addr    string
	url     string
	data    string
	store   string
	library string
	log     *os.File
	nats    *proc
	procs   map[string]*proc
}

// startProcCluster starts nats-server, waits until it listens, then starts
// the services. Cleanup stops them and, on failure, prints the logs' tail.
func startProcCluster(t *testing.T) *procCluster { return newProcCluster(t, true) }

// newProcCluster is startProcCluster; without natsFirst the services start
// while nats-server does not run yet (c.nats.start starts it).
func newProcCluster(t *testing.T, natsFirst bool) *procCluster {
	t.Helper()
	return newProcClusterWith(t, clusterOptions{natsFirst: natsFirst})
}

// clusterOptions shape a procCluster. The zero value is one verifier
// storing to the work directory's store, and a 4 s ack wait.
type clusterOptions struct {
	natsFirst bool
	// verifiers is how many verifier processes run (0: one, named
	// "verifier"; more are named verifier1, verifier2, ...).
	verifiers int
	// store is the verifiers' --store (empty: a directory in the work dir);
	// verifierArgs are added to their command lines.
	store        string
	verifierArgs []string
	// sandboxArgs are added to the sandbox-workers' command lines.
	sandboxArgs []string
	// ackWait is every consumer's --ack-wait (0: 4 s).
	ackWait time.Duration
}

// newProcClusterWith is newProcCluster shaped by o.
func newProcClusterWith(t *testing.T, o clusterOptions) *procCluster {
	t.Helper()
	natsFirst := o.natsFirst
	ackWait := "4s"
	if o.ackWait > 0 {
		ackWait = o.ackWait.String()
	}
	natsBin := natsServerBinary(t)
	bin := buildBinaries(t)
	// Sandboxes run as uid 65534: the work dir must be reachable by others,
	// which t.TempDir (0700 parent) is not.
	work := sandboxReachableDir(t)
	logf, err := os.Create(filepath.Join(work, "services.log"))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	c := &procCluster{t: t, work: work, addr: addr, url: "nats://" + addr, data: dataRoot(t),
		store: filepath.Join(work, "store"), library: filepath.Join(work, "library"), log: logf}
	c.nats = &proc{t: t, name: "nats-server", log: logf, args: []string{natsBin, "-js", "-a", host, "-p", port, "-sd", filepath.Join(work, "nats")}}
	if natsFirst {
		c.nats.start()
	}
	t.Cleanup(func() { c.nats.stop(); logf.Close() })
	if err := os.MkdirAll(tasks.AgentTree(c.library), 0o755); err != nil {
		t.Fatal(err)
	}
	common := []string{"--nats", c.url, "--metrics", ""}
	mk := func(name string, extra ...string) *proc {
		args := append([]string{filepath.Join(bin, strings.TrimRight(name, "0123456789"))}, common...)
		return &proc{t: t, name: name, log: logf, args: append(args, extra...)}
	}
	wr := func(i int) string {
		d := filepath.Join(work, fmt.Sprintf("sandboxes-%d", i))
		_ = os.MkdirAll(d, 0o755)
		return d
	}
	data, library := c.data, c.library
	if o.store != "" {
		c.store = o.store
	}
	c.procs = map[string]*proc{
		"dispatcher":      mk("dispatcher", "--data", data, "--library", library),
		"llm-worker1":     mk("llm-worker1", "--data", data, "--library", library, "--ack-wait", ackWait, "--concurrency", "8"),
		"llm-worker2":     mk("llm-worker2", "--data", data, "--library", library, "--ack-wait", ackWait, "--concurrency", "8"),
		"sandbox-worker1": mk("sandbox-worker1", append([]string{"--agent-tree", tasks.AgentTree(library), "--work-root", wr(1), "--ack-wait", ackWait}, o.sandboxArgs...)...),
		"sandbox-worker2": mk("sandbox-worker2", append([]string{"--agent-tree", tasks.AgentTree(library), "--work-root", wr(2), "--ack-wait", ackWait}, o.sandboxArgs...)...),
	}
	verifier := append([]string{"--data", data, "--library", library, "--store", c.store, "--ack-wait", ackWait, "--concurrency", "8"}, o.verifierArgs...)
	if o.verifiers <= 1 {
		c.procs["verifier"] = mk("verifier", verifier...)
	} else {
		for i := 1; i <= o.verifiers; i++ {
			name := fmt.Sprintf("verifier%d", i)
			c.procs[name] = mk(name, verifier...)
		}
	}
	if natsFirst {
		waitListening(t, addr)
	}
	for _, p := range c.procs {
		p.start()
	}
	t.Cleanup(func() {
		c.stopServices()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			_ = os.WriteFile(filepath.Join(os.TempDir(), "medgym-chaos-services.log"), b, 0o644)
			t.Logf("service logs (tail):\n%s", tail(string(b), 4000))
		}
	})
	return c
}

// failOnExit makes a service that exits on its own (not killed by the
// chaos) fail the test and cancel its context.
func (c *procCluster) failOnExit(cancel context.CancelFunc) {
	for _, p := range c.procs {
		p.onExit = func(name string, err error) {
			c.t.Errorf("%s exited on its own: %v", name, err)
			cancel()
		}
	}
}

// restart SIGKILLs a service, starts it again and waits until it logs that
// it is running (so that the next disruption does not meet it starting).
func (c *procCluster) restart(name string) {
	running := `msg="` + strings.TrimRight(name, "0123456789") + ` running"`
	before := c.logCount(running)
	c.procs[name].kill()
	time.Sleep(300 * time.Millisecond)
	c.procs[name].start()
	for deadline := time.Now().Add(time.Minute); c.logCount(running) <= before; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Errorf("%s not running a minute after its restart", name)
			return
		}
	}
}

// logCount counts the lines of the services' log that contain s.
func (c *procCluster) logCount(s string) int {
	b, _ := os.ReadFile(c.log.Name())
	return strings.Count(string(b), s)
}

func (c *procCluster) stopServices() {
	for _, p := range c.procs {
		p.stop()
	}
}

// chaosStep is one disruption, done once the run has reached at scored
// episodes (as progress reads it).
type chaosStep struct {
	at   int
	name string
	do   func()
}

// runChaos does the steps in order as the run progresses and sends the
// names of those it did when done or when ctx ends.
func runChaos(ctx context.Context, progress func() int, steps []chaosStep) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		var did []string
		defer func() { out <- did }()
		for _, step := range steps {
			for progress() < step.at {
				if ctx.Err() != nil {
					return
				}
				time.Sleep(30 * time.Millisecond)
			}
			step.do()
			did = append(did, step.name)
		}
	}()
	return out
}

// storedOnce counts a run's rows over every file of a directory store (not
// through ReadRun's dedupe), by episode id.
func storedOnce(t *testing.T, storeDir, run string) (map[string]int, int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(storeDir, "trajectories", "run="+run, "*", "*.parquet"))
	count := map[string]int{}
	total := 0
	for _, fpath := range files {
		for _, r := range readParquetFile(t, fpath) {
			count[r.EpisodeID]++
			total++
		}
	}
	return count, total
}

// eachStoredOnce fails the test for every episode stored more than once
// in the run's files, and reports whether they hold episodes episodes,
// episodes rows in all (failing the test if not).
func eachStoredOnce(t *testing.T, storeDir, run string, episodes int) bool {
	t.Helper()
	count, total := storedOnce(t, storeDir, run)
	for id, n := range count {
		if n != 1 {
			t.Errorf("episode %s stored %d times", id, n)
		}
	}
	if len(count) != episodes || total != episodes {
		t.Errorf("%d rows of %d episodes stored, want %d episodes stored once", total, len(count), episodes)
		return false
	}
	return true
}

// readParquetFile reads every row of one trajectory file.
func readParquetFile(t *testing.T, path string) []parquet.Row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := parquet.Read(context.Background(), f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

// waitNoProcessesIn fails if a process mentioning dir (a sandbox) outlives
// its worker by 10 s. The kernel tears a killed sandbox down
// asynchronously (its parent-death signal, then its namespaces), which
// takes a moment on a loaded machine.
func waitNoProcessesIn(t *testing.T, dir string) {
	t.Helper()
	left := processesMentioning(dir)
	for deadline := time.Now().Add(10 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = processesMentioning(dir) {
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Fatalf("processes left behind 10 s after their workers stopped: %v", left)
	}
}

// TestChaosExternalProcesses runs 100+ episodes against an external
// nats-server with every service as its own process, and SIGKILLs an
// llm-worker, a sandbox-worker, the dispatcher and the verifier at
// different moments. The run completes, every episode is stored exactly
// once with a real outcome, and no sandbox process is left behind.
func TestChaosExternalProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: external processes")
	}
	c := startProcCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), chaosTimeout())
	defer cancel()
	c.failOnExit(cancel)
	// The fake model answers with each task's reference solution, 80% of
	// the time; otherwise a wrong program or garbage.
	refs, err := cli.ReferenceIndex(ctx, c.data, []string{"medcalcbench"})
	if err != nil {
		t.Fatal(err)
	}
	llm := httptest.NewServer(fakellm.New(fakellm.Config{Policy: "reference", PCorrect: 0.8, GarbageRate: 0.05,
		ErrorRate429: 0.1, ErrorRate500: 0.05, Seed: 7, References: refs, Model: "fake"}))
	defer llm.Close()
	f := baseFlags(t)
	f.NATS, f.Store, f.Library = c.url, c.store, c.library
	f.Policy, f.LLMURL, f.Model = "openai", llm.URL+"/v1", "fake"
	f.Limit, f.Samples, f.RunID, f.MaxInFlight = 60, 2, "chaos", 16
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	// The chaos: kill processes as the run passes milestones, restart them.
	conn, err := bus.Connect(ctx, c.url, "chaos", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var steps []chaosStep
	for _, s := range []struct {
		at   int
		name string
	}{{12, "llm-worker1"}, {35, "sandbox-worker1"}, {60, "dispatcher"}, {85, "verifier"}} {
		steps = append(steps, chaosStep{s.at, s.name, func() { c.restart(s.name) }})
	}
	chaosDone := runChaos(ctx, func() int { return done(ctx, conn, "chaos") }, steps)
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	killed := <-chaosDone
	if len(killed) != 4 {
		t.Fatalf("only %v were killed: the run finished before the chaos plan", killed)
	}
	if res.Total != 120 {
		t.Fatalf("run has %d episodes, want 120", res.Total)
	}
	rows := readRun(t, ctx, c.store, "chaos")
	if len(rows) != 120 {
		t.Fatalf("store holds %d rows, want 120", len(rows))
	}
	if _, total := storedOnce(t, c.store, "chaos"); total != 120 {
		t.Fatalf("%d rows across the run's files, want 120 (an episode was stored twice)", total)
	}
	for _, r := range rows {
		if !schemas.Outcome(r.Outcome).Valid() || r.Outcome == string(schemas.OutcomeInfraFailure) {
			t.Errorf("episode %s: outcome %q (%s)", r.EpisodeID, r.Outcome, r.Error)
		}
	}
	// No sandbox process survives its worker.
	c.stopServices()
	waitNoProcessesIn(t, c.work)
}

// done reads the number of scored episodes of a run.
func done(ctx context.Context, conn *bus.Conn, run string) int {
	n, err := conn.SubjectCount(ctx, schemas.StreamScores, schemas.EpisodeScored.For(run))
	if err != nil {
		return 0
	}
	return int(n)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// processesMentioning lists processes whose command line contains s.
func processesMentioning(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cl := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cl, s) && !strings.Contains(cl, "nats-server") {
			out = append(out, e.Name()+": "+cl)
		}
	}
	return out
}

func countRows(t *testing.T, path string) int {
	t.Helper()
	return len(readParquetFile(t, path))
}

func chaosTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MEDGYM_CHAOS_TIMEOUT")); err == nil {
		return d
	}
	return 8 * time.Minute
}
