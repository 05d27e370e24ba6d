package sandboxworker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
)

// TestWorkersShareAnEpisode: N sandbox-workers (N = 2, 3) on one durable
// consumer of a real JetStream take an episode's turns in turn (round
// robin: each pulls one message at a time). Turn k writes /work/tk and
// lists /work; whichever worker runs it must show exactly t0..tk. One
// worker is stopped mid-episode (with 2 it comes back later on its old
// work root). Before, a worker that had seen the episode kept its stale
// workspace and skipped the turns the others ran: ['t00'], ['t00', 't01'],
// ['t00', 't02'], ...
func TestWorkersShareAnEpisode(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d workers", n), func(t *testing.T) { shareEpisode(t, n) })
	}
}

// workerSet runs sandbox-workers, each on its own connection and work root.
type workerSet struct {
	t    *testing.T
	url  string
	root string
	stop map[int]func()
}

func (ws *workerSet) start(i int) {
	t := ws.t
	ctx, cancel := context.WithCancel(t.Context())
	log := slog.New(slog.DiscardHandler)
	conn, err := bus.Connect(ctx, ws.url, fmt.Sprintf("sandbox-worker-%d", i), log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Sandbox: sandbox.Config{WorkRoot: filepath.Join(ws.root, fmt.Sprintf("w%d", i))},
		Concurrency: 1, Worker: fmt.Sprintf("w%d", i), AckWait: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, conn, cfg, log) }()
	ws.stop[i] = func() {
		cancel()
		if err := <-errc; err != nil && ctx.Err() == nil {
			t.Errorf("worker %d: %v", i, err)
		}
		conn.Close()
	}
}

// episodeDriver plays the llm-worker's part for one episode: it publishes
// turn k's request with the earlier actions as Replay and checks the
// observation, whichever worker sends it.
type episodeDriver struct {
	t      *testing.T
	ctx    context.Context
	conn   *bus.Conn
	url    string
	run    string
	ep     string
	obs    *bus.Follower[schemas.Observation]
	replay []schemas.Action
	served []string
	stale  int // turns run by a worker that had the episode while another ran a turn
}

func newEpisodeDriver(t *testing.T, ctx context.Context, run string) *episodeDriver {
	url := bustest.StartJetStream(t)
	conn, err := bus.Connect(ctx, url, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	runs, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Create(ctx, run, schemas.RunStatus{Spec: schemas.RunSpec{RunID: run, Datasets: []string{"d"}, Samples: 1}}); err != nil {
		t.Fatal(err)
	}
	obs, err := bus.Follow[schemas.Observation](ctx, conn, schemas.StreamObservations, schemas.ObservationProduced.For(run))
	if err != nil {
		t.Fatal(err)
	}
	return &episodeDriver{t: t, ctx: ctx, conn: conn, url: url, run: run, ep: schemas.EpisodeID(run, "t1", 0), obs: obs}
}

// send publishes turn k: `touch tk`, then cmd, then `ls`.
func (d *episodeDriver) send(k int, cmd string) {
	p, _ := json.Marshal(map[string]string{"cmd": fmt.Sprintf("touch t%02d %s&& ls", k, cmd)})
	a := schemas.Action{Name: schemas.ActionTerminal, Params: p}
	req := schemas.ActionRequest{Ref: schemas.EpisodeRef{RunID: d.run, EpisodeID: d.ep, TaskID: "t1", Dataset: "d", Turn: k},
		Action: a, TimeoutSec: 20, Replay: slices.Clone(d.replay)}
	if err := d.conn.Publish(d.ctx, schemas.ActionRequested.For(d.run), schemas.MsgID(d.ep, k, "action"), req); err != nil {
		d.t.Fatal(err)
	}
	d.replay = append(d.replay, a)
}

// check waits for turn k's observation: /work must hold exactly t0..tk.
func (d *episodeDriver) check(k int) schemas.Observation {
	t := d.t
	t.Helper()
	o := nextObservation(t, d.obs, k)
	var want []string
	for j := 0; j <= k; j++ {
		want = append(want, fmt.Sprintf("t%02d", j))
	}
	if got := strings.Fields(o.Result.Stdout); o.Result.Status != schemas.StatusOK || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("turn %d on %s (turns so far on %v): /work holds %q, want %q (%s: %s)", k, o.Worker, d.served, got, want, o.Result.Status, o.Result.Message)
	}
	if last := lastIndex(d.served, o.Worker); last >= 0 && last < len(d.served)-1 {
		d.stale++
	}
	d.served = append(d.served, o.Worker)
	return o
}

func (d *episodeDriver) done() {
	if d.stale == 0 {
		d.t.Fatalf("no worker came back to the episode after another ran a turn (%v): nothing was tested", d.served)
	}
	d.t.Logf("turns served by %v", d.served)
}

func shareEpisode(t *testing.T, n int) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d := newEpisodeDriver(t, ctx, fmt.Sprintf("share%d", n))
	ws := &workerSet{t: t, url: d.url, root: sandboxRoot(t), stop: map[int]func(){}}
	for i := range n {
		ws.start(i)
	}
	defer func() {
		for _, stop := range ws.stop {
			stop()
		}
	}()
	waitPulls(t, d.conn, n)
	stopAt, restartAt := 3, -1 // worker 0 stops after turn 3
	if n == 2 {
		restartAt = 5 // and comes back after turn 5, or one worker would be left
	}
	for k := range 9 {
		d.send(k, "")
		d.check(k)
		switch k {
		case stopAt:
			ws.stop[0]()
			delete(ws.stop, 0)
			waitPulls(t, d.conn, n-1)
		case restartAt:
			ws.start(0)
			waitPulls(t, d.conn, n)
		}
	}
	d.done()
}

// childArgs, in a test process's environment, makes it a sandbox-worker
// with these flags (TestMain), so a test can SIGKILL one.
const childArgs = "MEDGYM_TEST_SANDBOX_WORKER_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childArgs); args != "" {
		bus.Main(Binary.Name, func(ctx context.Context, _ []string, getenv func(string) string, stderr io.Writer) error {
			return Binary.Run(ctx, strings.Fields(args), getenv, stderr)
		})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWorkerKilledMidAction: three sandbox-worker processes share an
// episode; the one running turn 4 (which sleeps) is SIGKILLed in the middle
// of it. After --ack-wait another worker gets the turn, catches its
// workspace up and runs it; every turn's /work is exact.
func TestWorkerKilledMidAction(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	root := sandboxRoot(t)
	d := newEpisodeDriver(t, ctx, "killed")
	tree := filepath.Join(root, "agent") // no resources; readable by the sandbox user
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*exec.Cmd{}
	for i := range 3 {
		name := fmt.Sprintf("w%d", i)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childArgs+"="+strings.Join([]string{"--nats", d.url, "--work-root", filepath.Join(root, name),
			"--agent-tree", tree, "--concurrency", "1", "--name", name, "--ack-wait", "2s", "--metrics", "127.0.0.1:0"}, " "))
		logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[name] = cmd
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			_ = logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("%s's log:\n%s", name, b)
			}
		})
	}
	waitPulls(t, d.conn, 3)
	const killAt = 4
	for k := range 8 {
		if k != killAt {
			d.send(k, "")
			d.check(k)
			continue
		}
		d.send(k, "&& sleep 3 ")
		victim := ""
		for victim == "" && ctx.Err() == nil {
			for name := range procs {
				if _, err := os.Stat(filepath.Join(root, name, d.ep, fmt.Sprintf("t%02d", k))); err == nil {
					victim = name
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := procs[victim].Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = procs[victim].Wait()
		if o := d.check(k); o.Worker == victim {
			t.Fatalf("turn %d's observation came from %s, killed while running it", k, victim)
		}
		t.Logf("killed %s in the middle of turn %d", victim, k)
	}
	d.done()
}

// sandboxRoot skips (fails in CI) without bwrap and returns a temporary
// directory the sandbox user (uid 65534) can reach.
func sandboxRoot(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bwrap missing in CI")
		}
		t.Skip("bwrap not installed")
	}
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func lastIndex(s []string, v string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == v {
			return i
		}
	}
	return -1
}

// nextObservation waits for the observation of turn k.
func nextObservation(t *testing.T, f *bus.Follower[schemas.Observation], k int) schemas.Observation {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		m, ok, err := f.Next(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok && m.Value.Ref.Turn == k {
			return m.Value
		}
	}
	t.Fatalf("no observation of turn %d within a minute", k)
	return schemas.Observation{}
}

// waitPulls waits until n workers wait on the action consumer, so turns
// go round robin from the first.
func waitPulls(t *testing.T, conn *bus.Conn, n int) {
	t.Helper()
	prefix := schemas.StreamActions + "/" + schemas.DurableSandboxActions + ":"
	want := fmt.Sprintf("waiting pulls %d,", n)
	var last []string
	for range 600 {
		states, err := conn.ConsumerStates(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range states {
			if strings.HasPrefix(s, prefix) && strings.Contains(s, want) {
				return
			}
		}
		last = states
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%d workers never all waited for actions: %v", n, last)
}
