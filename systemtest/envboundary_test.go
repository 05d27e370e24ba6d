package systemtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/env/apitest"
	"github.com/medgym/medgym/store"
)

// envServeArgs is `medgym env serve` on an embedded server over lib with
// state and store under dir, plus args.
func envServeArgs(t testing.TB, lib, dir string, args ...string) []string {
	return append([]string{"env", "serve", "--addr", "127.0.0.1:0", "--library", lib, "--data", dataRoot(t),
		"--store", filepath.Join(dir, "store"), "--state", filepath.Join(dir, "state"), "--dataset", "eicu", "--log", "error"}, args...)
}

// playToEnd plays a session of eicu-canary-0 through c: one code run (the
// sandbox), then an answer; it returns the session's final status.
func playToEnd(c *apiClient, runID string) map[string]any {
	c.t.Helper()
	sess := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": runID}})
	path := "/v1/sessions/" + sess["session_id"].(string)
	if r := c.must(200, "POST", path+"/step", map[string]any{"turn": 0, "content": act("validate_code", map[string]any{"code": "print(6*7)"})}); r["observation"] != "42\n" {
		c.t.Fatalf("code step: %v", r)
	}
	if r := c.must(200, "POST", path+"/step", map[string]any{"turn": 1, "content": act("answer", map[string]any{"answer": "42"})}); r["done"] != true {
		c.t.Fatalf("answer step: %v", r)
	}
	return c.must(200, "GET", path, nil)
}

// TestEnvServeBusIsPrivate: `medgym env serve` with a token, as a process
// of its own. Its embedded JetStream used to listen on a loopback port
// without users, where any local process could rewrite a session as
// correct with reward 1 and the API then answered so. Now the process
// listens on its API's port only; an intruder tries every other port it
// listens on as NATS and, were one to answer, rewrites the session; the
// session then ends with the outcome its own steps earn.
func TestEnvServeBusIsPrivate(t *testing.T) {
	needSandbox(t)
	lib := canaryLibrary(t, "MEDGYM-CANARY-private")
	p := medgym(t, []string{"MEDGYM_ENV_TOKEN=tok"}, envServeArgs(t, lib, t.TempDir())...)
	base := p.serving(t)
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, chk, base)
	c.token = "tok"
	sess := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": "env-private"}})
	id := sess["session_id"].(string)

	u, _ := url.Parse(base)
	api, _ := strconv.Atoi(u.Port())
	ports, err := bustest.ListeningPorts(p.cmd.Process.Pid)
	if err != nil {
		t.Skip(err)
	}
	for _, port := range ports {
		if port == api {
			continue
		}
		t.Errorf("env serve listens on port %d besides its API's %d", port, api)
		rewriteSession(t, port, id, sess["episode_id"].(string))
	}
	path := "/v1/sessions/" + id
	if st := c.must(200, "GET", path, nil); st["done"] != false {
		t.Fatalf("the session was rewritten: %v", st)
	}
	last := c.must(200, "POST", path+"/step", map[string]any{"turn": 0, "content": act("answer", map[string]any{"answer": "I do not know"})})
	if st := c.must(200, "GET", path, nil); last["reward"] != 0.0 || st["outcome"] != "incorrect" {
		t.Fatalf("the wrong answer ended as %v (session %v)", last, st)
	}
	checkContract(t, chk, "")
}

// rewriteSession is the intruder: as a NATS client of port (no
// credentials), it marks session id scored correct with reward 1.
func rewriteSession(t *testing.T, port int, id, episode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, fmt.Sprintf("nats://127.0.0.1:%d", port), "intruder", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		return // not NATS, or refused
	}
	defer conn.Close()
	kv, err := bus.OpenStateBucket[map[string]any](ctx, conn, schemas.BucketEnvSessions)
	if err != nil {
		return
	}
	s, _, err := kv.Get(ctx, "s."+id)
	if err != nil {
		return
	}
	s["score"] = map[string]any{"run_id": "env-private", "episode_id": episode, "dataset": "eicu", "outcome": "correct", "reward": 1}
	if _, err := kv.Put(ctx, "s."+id, s); err == nil {
		t.Errorf("a NATS client without credentials on port %d rewrote session %s as correct", port, id)
	}
}

// TestStateFolderLocked: two commands on one --state each ran a JetStream
// server over the same files (one run hung, another stored 25 rows for 20
// episodes). With `medgym env serve` running on a state folder, a `medgym
// run`, a second `env serve` and a `medgym cancel` on it, each a process
// of its own, fail at once naming --state and the holder's process id;
// once it stops, cancel gets past the lock.
func TestStateFolderLocked(t *testing.T) {
	needSandbox(t)
	lib := canaryLibrary(t, "MEDGYM-CANARY-lock")
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	holder := medgym(t, nil, envServeArgs(t, lib, dir)...)
	holder.serving(t)
	want := fmt.Sprintf("--state %s is in use by process %d (medgym env serve)", state, holder.cmd.Process.Pid)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"run", "--dataset", "eicu", "--split", "test", "--policy", "reference", "--library", lib, "--data", dataRoot(t),
			"--store", filepath.Join(dir, "store2"), "--state", state, "--quiet"},
		envServeArgs(t, lib, dir),
		{"cancel", "--state", state, "--store", filepath.Join(dir, "store"), "some-run"},
	} {
		p := medgym(t, nil, args...)
		err := p.wait(ctx)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(p.stderr(), want) {
			t.Errorf("medgym %s beside env serve: %v\n%s\nwant an error with %q", args[0], err, p.stderr(), want)
		}
	}
	holder.stop(t)
	p := medgym(t, nil, "cancel", "--state", state, "--store", filepath.Join(dir, "store"), "some-run")
	if err := p.wait(ctx); err == nil || !strings.Contains(p.stderr(), "no run some-run") {
		t.Errorf("cancel after env serve stopped: %v\n%s\nwant: no run some-run", err, p.stderr())
	}
}

// TestEnvServeSurvivesSlowClients: 3 × 7,000 clients sending their bodies
// slowly once took `medgym env serve` to its descriptor limit, and its
// embedded streams stayed wedged until a restart. Here env serve runs as a
// process limited to 256 descriptors, with --max-conns 48 and a 1 s read
// timeout, under 300 clients that trickle headers or bodies and reconnect
// when cut off: a session started during the flood is played to its end
// (a code run in the sandbox, then an answer, scored and stored), and so
// is one after it, by the same process.
func TestEnvServeSurvivesSlowClients(t *testing.T) {
	needSandbox(t)
	lib := canaryLibrary(t, "MEDGYM-CANARY-slow")
	dir := t.TempDir()
	p := medgym(t, []string{medgymNoFile + "=256"}, envServeArgs(t, lib, dir, "--max-conns", "48", "--read-timeout", "1s")...)
	base := p.serving(t)
	addr := strings.TrimPrefix(base, "http://")

	ctx, stopFlood := context.WithCancel(context.Background())
	var flood sync.WaitGroup
	for i := range 300 {
		flood.Go(func() { slowClient(ctx, addr, i%2 == 0) })
	}
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	during := playToEnd(newAPIClient(t, chk, base), "env-flood")
	stopFlood()
	flood.Wait()
	after := playToEnd(newAPIClient(t, chk, base), "env-after")
	for _, st := range []map[string]any{during, after} {
		if st["done"] != true || st["outcome"] != "incorrect" || st["row"] == nil {
			t.Errorf("session %v: want done, incorrect (the canary is the answer), stored", st)
		}
	}
	p.stop(t)
	for _, run := range []string{"env-flood", "env-after"} {
		if rows := readRun(t, context.Background(), filepath.Join(dir, "store"), run); len(rows) != 1 || len(rows[0].Turns) != 2 {
			t.Errorf("run %s stored %d rows", run, len(rows))
		}
	}
	checkContract(t, chk, "")
}

// slowClient opens a connection to addr and trickles a request into it, a
// byte every 200 ms (a body when body is set, else its headers), opening
// another when the server cuts it off, until ctx is done.
func slowClient(ctx context.Context, addr string, body bool) {
	for ctx.Err() == nil {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		start := "GET /v1/tasks HTTP/1.1\r\nHost: x\r\nX-Slow: "
		if body {
			start = "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"task_id\": \""
		}
		_, err = c.Write([]byte(start))
		for err == nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
				_, err = c.Write([]byte("x"))
			}
		}
		_ = c.Close()
	}
}

// storeHeldRuns writes a correct row of eicu-canary-0 for the runs eval-1
// (an evaluation) and env-<today> (the env server's default run of the
// day) into the store at dir, and returns env-<today>.
func storeHeldRuns(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	today := "env-" + time.Now().UTC().Format("20060102")
	var held []parquet.Row
	for _, run := range []string{"eval-1", today} {
		held = append(held, parquet.Row{RunID: run, EpisodeID: schemas.EpisodeID(run, "eicu-canary-0", 0), Dataset: "eicu",
			TaskID: "eicu-canary-0", Outcome: "correct", Reward: 1})
	}
	if _, err := st.Write(ctx, held); err != nil {
		t.Fatal(err)
	}
	return today
}

// TestEnvSessionsKeepOutOfStoredRuns: an env server on a fresh state over
// a store that holds runs (an evaluation run, and a run named as the
// server's default run of the day) used to add sessions to them, a
// colliding episode id silently keeping the old row. Now a session naming
// the stored run is refused (409 run_exists), sessions naming none go to a
// default run of their own, a new run id works, and the stored runs keep
// exactly their rows.
func TestEnvSessionsKeepOutOfStoredRuns(t *testing.T) {
	needSandbox(t)
	lib := canaryLibrary(t, "MEDGYM-CANARY-runs")
	dir := t.TempDir()
	ctx := context.Background()
	today := storeHeldRuns(t, ctx, filepath.Join(dir, "store"))
	p := startEnv(t, lib, dir)
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, chk, p.url)
	for _, run := range []string{"eval-1", today} {
		out := c.must(409, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": run}})
		if msg, _ := out["error"].(map[string]any)["message"].(string); errCode(out) != "run_exists" || !strings.Contains(msg, run) {
			t.Errorf("a session of stored run %s: %v", run, out)
		}
	}
	def := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0"})
	defRun, _ := def["run_id"].(string)
	if !strings.HasPrefix(defRun, today+"-") {
		t.Errorf("the default run is %q, want %s-<time> (the store holds %s)", defRun, today, today)
	}
	c.must(200, "POST", "/v1/sessions/"+def["session_id"].(string)+"/step", map[string]any{"turn": 0, "content": act("answer", map[string]any{"answer": "x"})})
	for range 2 { // a new run, and the same run again: it is this server's now
		s := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-1", "options": map[string]any{"run_id": "env-new"}})
		c.must(200, "POST", "/v1/sessions/"+s["session_id"].(string)+"/step", map[string]any{"turn": 0, "content": act("answer", map[string]any{"answer": "x"})})
	}
	p.stop(t)
	for run, want := range map[string]int{"eval-1": 1, today: 1, defRun: 1, "env-new": 2} {
		rows := readRun(t, ctx, filepath.Join(dir, "store"), run)
		if len(rows) != want {
			t.Errorf("run %s holds %d rows, want %d", run, len(rows), want)
		}
		if (run == "eval-1" || run == today) && (len(rows) != 1 || rows[0].Outcome != "correct" || rows[0].Reward != 1) {
			t.Errorf("stored run %s changed: %+v", run, rows)
		}
	}
	checkContract(t, chk, "")
}

// TestEnvServeNATSKeepsOutOfStoredRuns: `medgym env serve --nats` looked
// only in MEDGYM_RUNS for a session's run, so with JetStream that does not
// know a run the store holds (another deployment's, or one whose record
// expired) a session added rows to it. With --store given, a session
// naming the stored run is refused (409 run_exists), a new run id is not,
// sessions naming none move aside from the stored env-<date>, and the
// stored runs keep their rows.
func TestEnvServeNATSKeepsOutOfStoredRuns(t *testing.T) {
	lib := canaryLibrary(t, "MEDGYM-CANARY-natsruns")
	dir := t.TempDir()
	ctx := context.Background()
	today := storeHeldRuns(t, ctx, filepath.Join(dir, "store"))
	p := startEnv(t, lib, dir, "--nats", bustest.StartJetStream(t))
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, chk, p.url)
	out := c.must(409, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": "eval-1"}})
	if msg, _ := out["error"].(map[string]any)["message"].(string); errCode(out) != "run_exists" || !strings.Contains(msg, "eval-1") {
		t.Errorf("a session of the stored run: %v", out)
	}
	c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": "env-new"}})
	def := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0"})
	if run, _ := def["run_id"].(string); !strings.HasPrefix(run, today+"-") {
		t.Errorf("the default run is %q, want %s-<time> (the store holds %s)", run, today, today)
	}
	p.stop(t)
	for _, run := range []string{"eval-1", today} {
		if rows := readRun(t, ctx, filepath.Join(dir, "store"), run); len(rows) != 1 || rows[0].Outcome != "correct" {
			t.Errorf("stored run %s changed: %+v", run, rows)
		}
	}
	checkContract(t, chk, "")
}
