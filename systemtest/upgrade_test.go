package systemtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// previousRelease is the last commit of wire schema 1.1, the release
// before the current contract (the commit the golden files of
// schemas/testdata/wire-v1.1 were encoded at). When the schema's version
// moves on, point this at the then-previous release.
const previousRelease = "8ad7c89450a248551f2392b40263671df7ee4ffc"

// previousReleaseWorkers builds the previous release's llm-worker and
// sandbox-worker from this repository's history (git archive of
// previousRelease, built with its own go.work) once per machine, into
// <tools>/release-<commit>/; about 30 s the first time.
func previousReleaseWorkers(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(toolsDir(), "release-"+previousRelease[:12])
	workers := []string{"llm-worker", "sandbox-worker"}
	ready := true
	for _, w := range workers {
		if _, err := os.Stat(filepath.Join(dir, w)); err != nil {
			ready = false
		}
	}
	if ready {
		return dir
	}
	root := repoRoot(t)
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", previousRelease+"^{commit}").CombinedOutput(); err != nil {
		if shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output(); strings.TrimSpace(string(shallow)) == "true" {
			t.Skipf("the previous release %s is not in this shallow clone's history and cannot be fetched (.ci/run tries git fetch --unshallow): %s", previousRelease, out)
		}
		t.Fatalf("the previous release %s is not in this clone's history (a shallow clone? git fetch --unshallow): %v %s", previousRelease, err, out)
	}
	src, err := os.MkdirTemp("", "medgym-release-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, previousRelease, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousRelease, err, out)
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	for _, w := range workers {
		cmd := exec.Command("go", "build", "-o", filepath.Join(tmp, w), "./services/"+w)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(src, "go.work"), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the previous release's %s: %v\n%s", w, err, out)
		}
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

var ackedMetric = regexp.MustCompile(`(?m)^medgym_messages_handled_total\{[^}]*result="ack"[^}]*\} ([0-9.e+]+)$`)

// ackedIn sums the messages acked in a /metrics text, over the handlers.
func ackedIn(metrics string) int {
	total := 0.0
	for _, m := range ackedMetric.FindAllStringSubmatch(metrics, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		total += v
	}
	return int(total)
}

// scrapeAckedAt reads the messages a service on this host acked from its
// /metrics (-1 when it does not answer).
func scrapeAckedAt(addr string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	return ackedIn(string(b))
}

// TestRollingUpgradeFromPreviousRelease (issue 17, mixed versions): the
// previous release's workers (schema 1.1, built from this repository's
// history) run a run beside the current ones on the same streams, and are
// replaced one at a time as a rolling upgrade does. The old workers start
// first and create the streams and buckets, as the release before would
// have; then the current dispatcher and verifier start and the run is
// submitted. As the run goes on, each old worker is stopped (the first
// llm-worker by SIGKILL, mid-episode, so a current worker resumes its
// episodes from the state the old one saved; the others by SIGTERM) and a
// current one started in its place, so for most of the run old and new
// workers consume each other's messages: requests, actions, observations,
// checks and results of both schema versions. Every episode is stored
// exactly once with a real outcome, every old worker acked work before it
// was replaced, and the current workers acked work after.
func TestRollingUpgradeFromPreviousRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the previous release's workers beside the current ones, ~1 minute")
	}
	const episodes = 120
	old := previousReleaseWorkers(t)
	natsBin := natsServerBinary(t)
	bin := buildBinaries(t)
	work := sandboxReachableDir(t)
	logf, err := os.Create(filepath.Join(work, "services.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	addr := freeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	url := "nats://" + addr
	natsProc := &proc{t: t, name: "nats-server", log: logf, args: []string{natsBin, "-js", "-a", host, "-p", port, "-sd", filepath.Join(work, "nats")}}
	natsProc.start()
	defer natsProc.stop()
	waitListening(t, addr)

	data, library, store := dataRoot(t), filepath.Join(work, "library"), filepath.Join(work, "store")
	agent := tasks.AgentTree(library)
	if err := os.MkdirAll(agent, 0o755); err != nil {
		t.Fatal(err)
	}
	metrics := map[string]string{}
	procs := map[string]*proc{}
	mk := func(name, exe string, args ...string) {
		metrics[name] = freeAddr(t)
		args = append([]string{exe, "--nats", url, "--metrics", metrics[name]}, args...)
		procs[name] = &proc{t: t, name: name, log: logf, args: args}
	}
	for i := 1; i <= 2; i++ {
		wr := filepath.Join(work, fmt.Sprintf("sandboxes-%d", i))
		if err := os.MkdirAll(wr, 0o755); err != nil {
			t.Fatal(err)
		}
		// The previous release's flags: its sandbox-worker mounts task
		// resources from --library (the agent tree here).
		mk(fmt.Sprintf("old-llm-worker%d", i), filepath.Join(old, "llm-worker"), "--data", data, "--library", library,
			"--ack-wait", "4s", "--concurrency", "8", "--name", fmt.Sprintf("old-llm-worker%d", i))
		mk(fmt.Sprintf("old-sandbox-worker%d", i), filepath.Join(old, "sandbox-worker"), "--library", agent, "--work-root", wr,
			"--ack-wait", "4s", "--name", fmt.Sprintf("old-sandbox-worker%d", i))
		mk(fmt.Sprintf("llm-worker%d", i), filepath.Join(bin, "llm-worker"), "--data", data, "--library", library,
			"--ack-wait", "4s", "--concurrency", "8")
		mk(fmt.Sprintf("sandbox-worker%d", i), filepath.Join(bin, "sandbox-worker"), "--agent-tree", agent, "--work-root", wr, "--ack-wait", "4s")
	}
	mk("dispatcher", filepath.Join(bin, "dispatcher"), "--data", data, "--library", library)
	mk("verifier", filepath.Join(bin, "verifier"), "--data", data, "--library", library, "--store", store, "--ack-wait", "4s", "--concurrency", "8")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	for _, p := range procs {
		p.onExit = func(name string, err error) {
			t.Errorf("%s exited on its own: %v", name, err)
			cancel()
		}
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("service logs (tail):\n%s", tail(string(b), 6000))
		}
	}()
	// The release before: its workers are up first and create the streams.
	for _, name := range []string{"old-llm-worker1", "old-llm-worker2", "old-sandbox-worker1", "old-sandbox-worker2"} {
		procs[name].start()
	}
	for _, name := range []string{"old-llm-worker1", "old-llm-worker2", "old-sandbox-worker1", "old-sandbox-worker2"} {
		for scrapeAckedAt(metrics[name]) < 0 {
			if ctx.Err() != nil {
				t.Fatalf("%s never served /metrics", name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	procs["dispatcher"].start()
	procs["verifier"].start()

	refs, err := cli.ReferenceIndex(ctx, data, []string{"medcalcbench"})
	if err != nil {
		t.Fatal(err)
	}
	llm := httptest.NewServer(fakellm.New(fakellm.Config{Policy: "reference", PCorrect: 0.9, Seed: 11, References: refs,
		LatencyMean: 150 * time.Millisecond, LatencyJitter: 50 * time.Millisecond, Model: "fake"}))
	defer llm.Close()
	f := baseFlags(t)
	f.NATS, f.Store, f.Library = url, store, library
	f.Policy, f.LLMURL, f.Model = "openai", llm.URL+"/v1", "fake"
	f.Limit, f.Samples, f.RunID, f.MaxInFlight = episodes/2, 2, "upgrade", 16
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := bus.Connect(ctx, url, "upgrade", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// The rolling upgrade, one worker at a time as the run goes on.
	oldAcked := map[string]int{}
	upgrade := func(name string, sig syscall.Signal) func() {
		return func() {
			oldName := "old-" + name
			oldAcked[oldName] = scrapeAckedAt(metrics[oldName])
			procs[oldName].signal(sig, 15*time.Second)
			procs[name].start()
		}
	}
	steps := []chaosStep{
		{15, "llm-worker1 (SIGKILL)", upgrade("llm-worker1", syscall.SIGKILL)},
		{35, "sandbox-worker1", upgrade("sandbox-worker1", syscall.SIGTERM)},
		{60, "llm-worker2", upgrade("llm-worker2", syscall.SIGTERM)},
		{85, "sandbox-worker2", upgrade("sandbox-worker2", syscall.SIGTERM)},
	}
	upgraded := runChaos(ctx, func() int { return done(ctx, conn, "upgrade") }, steps)
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if did := <-upgraded; len(did) != len(steps) {
		t.Fatalf("only %v were upgraded: the run finished before the upgrade plan", did)
	}
	if res.Total != episodes {
		t.Fatalf("run has %d episodes, want %d", res.Total, episodes)
	}
	for name, n := range oldAcked {
		if n <= 0 {
			t.Errorf("%s (previous release) acked %d messages before it was replaced: it took no part", name, n)
		}
	}
	for _, name := range []string{"llm-worker1", "sandbox-worker1", "llm-worker2", "sandbox-worker2"} {
		if n := scrapeAckedAt(metrics[name]); n <= 0 {
			t.Errorf("%s (current) acked %d messages after the upgrade", name, n)
		}
	}
	t.Logf("previous release's workers acked before the upgrade: %v", oldAcked)
	count, total := storedOnce(t, store, "upgrade")
	if total != episodes || len(count) != episodes {
		t.Fatalf("%d rows for %d distinct episodes across the run's files, want %d of each", total, len(count), episodes)
	}
	for _, r := range readRun(t, ctx, store, "upgrade") {
		if !schemas.Outcome(r.Outcome).Valid() || r.Outcome == string(schemas.OutcomeInfraFailure) {
			t.Errorf("episode %s: outcome %q (%s)", r.EpisodeID, r.Outcome, r.Error)
		}
	}
}
