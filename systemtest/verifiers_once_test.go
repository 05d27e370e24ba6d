package systemtest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/query"
	"github.com/medgym/medgym/tasks"
)

// TestTwoVerifiersStoreOnce: two verifier processes share a run; one
// stores a batch and cannot ack it, and the other gets the redelivery. The
// run has exactly as many rows as episodes, counted by DuckDB over the
// store's files and by reading every file, and the manifest agrees.
//
// Steps: v2 alone stores the first episodes (so it has read the run);
// v2 is paused (SIGSTOP) and v1 takes the rest, holding them in its batch
// (--batch-age 1h); v1 is stopped (SIGTERM): it writes its batch on the way
// out but its handlers have given up, so nothing is acked; v2 resumes
// (SIGCONT) and gets every one of them again. Before claims, v2 knew the
// run's stored episodes only as of its first write and stored them all a
// second time.
func TestTwoVerifiersStoreOnce(t *testing.T) {
	const (
		run      = "twoverifiers"
		first    = 3 // episodes v2 stores alone
		episodes = 8
	)
	natsBin := natsServerBinary(t)
	verifierBin := buildBinary(t, "verifier")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	work := t.TempDir()
	logf, err := os.Create(filepath.Join(work, "services.log"))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	natsProc := &proc{t: t, name: "nats-server", log: logf, args: []string{natsBin, "-js", "-a", host, "-p", port, "-sd", filepath.Join(work, "nats")}}
	natsProc.start()
	t.Cleanup(func() {
		natsProc.stop()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("service logs (tail):\n%s", tail(string(b), 6000))
		}
		logf.Close()
	})
	waitListening(t, addr)

	// The model answers the first episodes at once and the rest when the
	// gate opens.
	answer := fakellm.New(fakellm.Config{Policy: fakellm.PolicyScript, Script: []string{answerReply}, Seed: 1, Model: "fake"})
	var calls atomic.Int32
	gate := make(chan struct{})
	var openGate sync.Once
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") && calls.Add(1) > first {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		answer.ServeHTTP(w, r)
	}))
	defer llm.Close()
	defer openGate.Do(func() { close(gate) }) // before the server closes

	f := baseFlags(t)
	f.NATS = "nats://" + addr
	f.Library = filepath.Join(work, "library")
	if err := os.MkdirAll(tasks.AgentTree(f.Library), 0o755); err != nil {
		t.Fatal(err)
	}
	f.Policy, f.LLMURL, f.Model = "openai", llm.URL+"/v1", "fake"
	f.Limit, f.Samples, f.RunID, f.MaxInFlight = episodes, 1, run, episodes
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	conn, err := bus.Connect(ctx, f.NATS, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	// The dispatcher and the llm-worker in-process; no sandbox is needed
	// (every episode answers at once).
	goServices(t, ctx, f, func(string) *bus.Conn { return conn }, nil, log, tasks.AgentTree(f.Library), "verifier", "sandbox-worker")

	verifier := func(name string, extra ...string) *proc {
		args := append([]string{verifierBin, "--nats", f.NATS, "--data", f.Data, "--library", f.Library, "--store", f.Store,
			"--ack-wait", "2s"}, extra...)
		p := &proc{t: t, name: name, log: logf, args: args}
		t.Cleanup(func() { p.send(syscall.SIGCONT); p.stop() })
		return p
	}
	v1Metrics := freeAddr(t)
	// v2 has one slot, so one pull request at most waits for it while it
	// is paused.
	v2 := verifier("verifier2", "--concurrency", "1", "--batch-age", "50ms", "--metrics", "")
	v1 := verifier("verifier1", "--concurrency", "16", "--batch-age", "1h", "--metrics", v1Metrics)
	running := func() int {
		b, _ := os.ReadFile(logf.Name())
		return strings.Count(string(b), `msg="verifier running"`)
	}
	v2.start()
	waitUntil(t, ctx, "verifier2 running", func() bool { return running() == 1 })

	type result struct {
		res cli.RunResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := cli.RunSpec(ctx, spec, f, io.Discard)
		done <- result{res, err}
	}()
	stored := func() int {
		select {
		case r := <-done:
			t.Fatalf("the run ended early: %v, %v", r.res, r.err)
		default:
		}
		_, total := storedOnce(t, f.Store, run)
		return total
	}
	waitUntil(t, ctx, "verifier2 storing the first episodes", func() bool { return stored() == first && calls.Load() == episodes })

	v2.send(syscall.SIGSTOP)
	v1.start()
	waitUntil(t, ctx, "verifier1 running", func() bool { return running() == 2 })
	openGate.Do(func() { close(gate) })
	waitUntil(t, ctx, "verifier1 holding the other episodes", func() bool { return scrapeInFlight(v1Metrics) == episodes-first })
	v1.stop() // writes its batch on the way out; acks nothing
	if n := stored(); n != episodes {
		t.Fatalf("%d rows stored once verifier1 stopped, want %d (its batch written on the way out)", n, episodes)
	}
	v2.send(syscall.SIGCONT)

	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("the run did not finish")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.res.Total != episodes {
		t.Fatalf("run has %d episodes, want %d", res.res.Total, episodes)
	}
	allDrained(t, ctx, conn)

	eachStoredOnce(t, f.Store, run, episodes)
	_, rows, err := query.Query(ctx, f.Store, "SELECT count(*), count(DISTINCT episode_id) FROM trajectories WHERE run = '"+run+"'")
	if err != nil {
		t.Fatal(err)
	}
	if n, distinct := num(t, rows[0][0]), num(t, rows[0][1]); n != episodes || distinct != episodes {
		t.Errorf("DuckDB counts %v rows of %v episodes, want %d", n, distinct, episodes)
	}
	st, err := store.Open(ctx, f.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.ReadManifest(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, byOutcome := range m.Counts {
		for _, n := range byOutcome {
			sum += n
		}
	}
	if m.Total != episodes || sum != episodes {
		t.Errorf("manifest: total %d, counts %v; want %d", m.Total, m.Counts, episodes)
	}
}

// waitUntil polls cond until it holds, failing the test when ctx ends.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
