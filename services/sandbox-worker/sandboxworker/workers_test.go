package sandboxworker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

func shareEpisode(t *testing.T, n int) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	root := sandboxRoot(t)
	url := bustest.StartJetStream(t)
	conn, err := bus.Connect(ctx, url, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	runs, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	run := fmt.Sprintf("share%d", n)
	if _, err := runs.Create(ctx, run, schemas.RunStatus{Spec: schemas.RunSpec{RunID: run, Datasets: []string{"d"}, Samples: 1}}); err != nil {
		t.Fatal(err)
	}
	obs, err := bus.Follow[schemas.Observation](ctx, conn, schemas.StreamObservations, schemas.ObservationProduced.For(run))
	if err != nil {
		t.Fatal(err)
	}

	ws := &workerSet{t: t, url: url, root: root, stop: map[int]func(){}}
	for i := range n {
		ws.start(i)
	}
	defer func() {
		for _, stop := range ws.stop {
			stop()
		}
	}()
	waitPulls(t, conn, n)

	const turns = 9
	stopAt, restartAt := 3, -1 // worker 0 stops after turn 3
	if n == 2 {
		restartAt = 5 // and comes back after turn 5, or one worker would be left
	}
	ep := schemas.EpisodeID(run, "t1", 0)
	var replay []schemas.Action
	var served []string
	stale := 0 // turns run by a worker that had the episode while another ran a turn
	for k := range turns {
		p, _ := json.Marshal(map[string]string{"cmd": fmt.Sprintf("touch t%02d && ls", k)})
		a := schemas.Action{Name: schemas.ActionTerminal, Params: p}
		req := schemas.ActionRequest{Ref: schemas.EpisodeRef{RunID: run, EpisodeID: ep, TaskID: "t1", Dataset: "d", Turn: k},
			Action: a, TimeoutSec: 20, Replay: append([]schemas.Action(nil), replay...)}
		if err := conn.Publish(ctx, schemas.ActionRequested.For(run), schemas.MsgID(ep, k, "action"), req); err != nil {
			t.Fatal(err)
		}
		o := nextObservation(t, obs, k)
		var want []string
		for j := 0; j <= k; j++ {
			want = append(want, fmt.Sprintf("t%02d", j))
		}
		if got := strings.Fields(o.Result.Stdout); o.Result.Status != schemas.StatusOK || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("turn %d on %s (turns so far on %v): /work holds %q, want %q (%s: %s)", k, o.Worker, served, got, want, o.Result.Status, o.Result.Message)
		}
		if last := lastIndex(served, o.Worker); last >= 0 && last < len(served)-1 {
			stale++
		}
		served = append(served, o.Worker)
		replay = append(replay, a)
		switch k {
		case stopAt:
			ws.stop[0]()
			delete(ws.stop, 0)
			waitPulls(t, conn, n-1)
		case restartAt:
			ws.start(0)
			waitPulls(t, conn, n)
		}
	}
	if stale == 0 {
		t.Fatalf("no worker came back to the episode after another ran a turn (%v): nothing was tested", served)
	}
	t.Logf("turns served by %v", served)
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
