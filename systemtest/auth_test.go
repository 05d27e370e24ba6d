package systemtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/apitest"
	"github.com/medgym/medgym/services/env/env"
	"github.com/medgym/medgym/tasks"
)

// deployUsers are the users of deploy/nats/auth.conf and the variables
// nats-server reads their passwords from.
var deployUsers = map[string]string{
	"dispatcher":     "MEDGYM_NATS_PASSWORD_DISPATCHER",
	"llm-worker":     "MEDGYM_NATS_PASSWORD_LLM_WORKER",
	"sandbox-worker": "MEDGYM_NATS_PASSWORD_SANDBOX_WORKER",
	"verifier":       "MEDGYM_NATS_PASSWORD_VERIFIER",
	"env-server":     "MEDGYM_NATS_PASSWORD_ENV_SERVER",
	"client":         "MEDGYM_NATS_PASSWORD_CLIENT",
	"trainer":        "MEDGYM_NATS_PASSWORD_TRAINER",
	"admin":          "MEDGYM_NATS_PASSWORD_ADMIN",
}

// startDeployNATS runs the nats-server binary with deploy/nats's config,
// unchanged but for where it listens and stores (and, with nkeys, which
// auth file nats.conf includes), and fresh credentials per user in its
// environment: a random password, or an nkey whose seed file is returned.
func startDeployNATS(t *testing.T, withNKeys bool) (string, map[string]bus.Auth) {
	t.Helper()
	return startDeployNATSEdited(t, withNKeys, nil, nil)
}

// startDeployNATSEdited is startDeployNATS with each config file's text
// passed through edit (nil: unchanged) and, besides deployUsers, the users
// of extra (user: the variable its password is read from), as an operator
// adding users would write them.
func startDeployNATSEdited(t *testing.T, withNKeys bool, edit func(file, text string) string, extra map[string]string) (string, map[string]bus.Auth) {
	t.Helper()
	bin := natsServerBinary(t)
	src := filepath.Join(repoRoot(t), "deploy", "nats")
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(src, "*.conf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no config in %s: %v", src, err)
	}
	addr, mon := freeAddr(t), freeAddr(t)
	authInclude := "include ./auth.conf"
	if withNKeys {
		authInclude = "include ./auth-nkeys.conf"
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if filepath.Base(f) == "nats.conf" {
			for _, r := range []struct {
				re       *regexp.Regexp
				repl     string
				required bool
			}{
				{regexp.MustCompile(`(?m)^listen:.*$`), "listen: " + addr, true},
				{regexp.MustCompile(`(?m)^http:.*$`), "http: " + mon, false},
				{regexp.MustCompile(`(?m)^(\s*)store_dir:.*$`), "${1}store_dir: " + filepath.Join(dir, "js"), true},
				{regexp.MustCompile(`(?m)^include \./auth\.conf$`), authInclude, true},
			} {
				if r.required && !r.re.MatchString(s) {
					t.Fatalf("deploy/nats/nats.conf has no line matching %s to point elsewhere", r.re)
				}
				s = r.re.ReplaceAllString(s, r.repl)
			}
		}
		if edit != nil {
			s = edit(filepath.Base(f), s)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	creds := map[string]bus.Auth{}
	env := os.Environ()
	users := maps.Clone(deployUsers)
	maps.Copy(users, extra)
	for u, v := range users {
		if withNKeys {
			seed, pub := bustest.UserNKey(t)
			seedFile := filepath.Join(dir, u+".nk")
			if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
				t.Fatal(err)
			}
			creds[u] = bus.Auth{NKeyFile: seedFile}
			env = append(env, strings.Replace(v, "NATS_PASSWORD", "NKEY", 1)+"="+pub)
			continue
		}
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		creds[u] = bus.Auth{User: u, Password: hex.EncodeToString(b)}
		env = append(env, v+"="+creds[u].Password)
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", filepath.Join(dir, "nats.conf"))
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
	})
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("nats-server with deploy/nats/nats.conf did not start:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "nats://" + addr, creds
}

func connectAs(t *testing.T, ctx context.Context, url, user string, auth bus.Auth, log *slog.Logger) *bus.Conn {
	t.Helper()
	opts := []bus.ConnectOption{bus.WithAuth(auth), bus.WithRole(user)}
	if slices.Contains(schemas.BlobWriters, user) {
		opts = append(opts, bus.WithBlobService(user)) // as the service: its own blob store
	}
	conn, err := bus.Connect(ctx, url, "test-"+user, log, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// provisionAndConnect connects as admin and provisions the streams, buckets
// and durable consumers (`medgym nats provision`), then connects as each
// of users, which only verify them (bus.PrepareStreams with credentials).
func provisionAndConnect(t *testing.T, ctx context.Context, url string, pw map[string]bus.Auth, log *slog.Logger, users ...string) map[string]*bus.Conn {
	t.Helper()
	conns := map[string]*bus.Conn{"admin": connectAs(t, ctx, url, "admin", pw["admin"], log.With("user", "admin"))}
	if err := bus.Provision(ctx, conns["admin"], bus.StreamOptions{}); err != nil {
		t.Fatalf("admin: provision: %v", err)
	}
	for _, u := range users {
		conns[u] = connectAs(t, ctx, url, u, pw[u], log.With("user", u))
		if err := bus.PrepareStreams(ctx, conns[u], bus.StreamOptions{}); err != nil {
			t.Fatalf("%s: verify streams: %v", u, err)
		}
	}
	return conns
}

// TestDeployNATSAuth runs nats-server with deploy/nats's config: a client
// without credentials is refused; the llm-worker's user cannot publish a
// score while the verifier's can; and the whole pipeline, each service
// with its own user, completes a run submitted by the client user without
// one permission violation, the streams and durables provisioned by admin
// and only verified by each service's user.
func TestDeployNATSAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	url, pw := startDeployNATS(t, false)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))

	if _, err := bus.Connect(ctx, url, "anonymous", log); err == nil {
		t.Fatal("a client without credentials connected: authorisation is off")
	}
	if _, err := bus.Connect(ctx, url, "wrong", log, bus.WithAuth(bus.Auth{User: "verifier", Password: "guess"})); err == nil {
		t.Fatal("a wrong password connected")
	}

	conns := provisionAndConnect(t, ctx, url, pw, log, "dispatcher", "llm-worker", "sandbox-worker", "verifier", "client")
	scores := func() uint64 { return streamMsgsOf(t, ctx, conns["admin"], schemas.StreamScores) }
	forged := schemas.Score{RunID: "r1", EpisodeID: "e1", Outcome: schemas.OutcomeCorrect, Reward: 1}
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	err := conns["llm-worker"].Publish(pctx, schemas.EpisodeScored.For("r1"), "forged", forged)
	pcancel()
	if err == nil {
		t.Fatal("the llm-worker's user published a score")
	}
	if n := scores(); n != 0 {
		t.Fatalf("scores stream holds %d messages after the llm-worker's publish, want 0", n)
	}
	if !strings.Contains(logs.String(), "Permissions Violation for Publish to \\\"medgym.episode.scored.r1\\\"") &&
		!strings.Contains(logs.String(), `Permissions Violation for Publish to "medgym.episode.scored.r1"`) {
		t.Errorf("no permission violation logged for the llm-worker's score:\n%s", logs.String())
	}
	// Positive control: the verifier's user may.
	if err := conns["verifier"].Publish(ctx, schemas.EpisodeScored.For("r1"), "real", forged); err != nil {
		t.Fatalf("the verifier's user could not publish a score: %v", err)
	}
	if n := scores(); n != 1 {
		t.Fatalf("scores stream holds %d messages after the verifier's publish, want 1", n)
	}
	// Nor may a worker submit runs, or a client request episodes.
	for user, subj := range map[string]string{"llm-worker": schemas.RunSubmitted.For("x"), "client": schemas.EpisodeRequested.For("x"),
		"sandbox-worker": schemas.EpisodeCompleted.For("x")} {
		if err := conns[user].PublishCore(subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, subj := range []string{schemas.RunSubmitted.For("x"), schemas.EpisodeRequested.For("x"), schemas.EpisodeCompleted.For("x")} {
		for !strings.Contains(logs.String(), subj) {
			if time.Now().After(deadline) {
				t.Fatalf("no permission violation logged for %s:\n%s", subj, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Every service may use the blob object store that carries payloads over
	// max_payload (MEDGYM_BLOBS, ADR 10): put, read back,
	// overwrite, delete.
	blob := bytes.Repeat([]byte("trajectory "), 30_000)
	for _, u := range []string{"dispatcher", "llm-worker", "sandbox-worker", "verifier"} {
		bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		for range 2 { // the second put overwrites, which purges the old chunks
			if err = conns[u].PutBlob(bctx, "blob-"+u, blob); err != nil {
				break
			}
		}
		var got []byte
		if err == nil {
			got, err = conns[u].GetBlob(bctx, "blob-"+u)
		}
		if err == nil {
			err = conns[u].DeleteBlob(bctx, "blob-"+u)
		}
		bcancel()
		if err != nil || !bytes.Equal(got, blob) {
			t.Fatalf("%s: blob store: %v (%d bytes back of %d)\n%s", u, err, len(got), len(blob), logs.String())
		}
	}
	before := strings.Count(logs.String(), "Permissions Violation")

	// The pipeline, each service as its own user.
	f := baseFlags(t)
	f.Limit, f.RunID = 2, "auth"
	f.Library = sandboxReachableDir(t)
	goServices(t, ctx, f, func(name string) *bus.Conn { return conns[name] }, nil, slog.New(slog.DiscardHandler), f.Library)
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	client := conns["client"]
	if err := bus.SubmitRun(ctx, client, spec); err != nil {
		t.Fatalf("the client's user could not submit a run: %v", err)
	}
	status, outcomes, err := cli.Follow(ctx, client, spec.RunID, io.Discard, true, nil)
	if err != nil {
		t.Fatalf("follow as client: %v\n%s", err, logs.String())
	}
	if status.Total != 2 || outcomes[schemas.OutcomeCorrect] != 2 {
		t.Fatalf("outcomes %v of %d, want 2 correct\n%s", outcomes, status.Total, logs.String())
	}
	if rows := readRun(t, ctx, f.Store, spec.RunID); len(rows) != 2 {
		t.Fatalf("%d rows stored, want 2", len(rows))
	}
	if after := strings.Count(logs.String(), "Permissions Violation"); after != before {
		t.Fatalf("the pipeline ran into %d permission violations:\n%s", after-before, logs.String())
	}
	t.Logf("permission violations logged (the refused publishes above):\n%s", logs.String())
}

// TestDeployNATSNKeys: the same users authenticated by nkeys
// (auth-nkeys.conf included instead of auth.conf, each service reading its
// seed file from MEDGYM_NATS_NKEY): the llm-worker's key cannot publish a
// score, the verifier's can.
func TestDeployNATSNKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, creds := startDeployNATS(t, true)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if _, err := bus.Connect(ctx, url, "anonymous", log); err == nil {
		t.Fatal("a client without credentials connected: authorisation is off")
	}
	conns := map[string]*bus.Conn{}
	for _, u := range []string{"llm-worker", "verifier", "admin"} {
		auth, err := bus.AuthFromEnv(func(k string) string {
			if k == bus.EnvNATSNKey {
				return creds[u].NKeyFile
			}
			return ""
		})
		if err != nil {
			t.Fatal(err)
		}
		conns[u] = connectAs(t, ctx, url, u, auth, log.With("user", u))
	}
	if err := bus.Provision(ctx, conns["admin"], bus.StreamOptions{}); err != nil {
		t.Fatalf("admin: provision: %v", err)
	}
	for _, u := range []string{"llm-worker", "verifier"} {
		if err := bus.Verify(ctx, conns[u], bus.StreamOptions{}); err != nil {
			t.Fatalf("%s: verify: %v", u, err)
		}
	}
	sc := schemas.Score{RunID: "r1", EpisodeID: "e1", Outcome: schemas.OutcomeCorrect, Reward: 1}
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	err := conns["llm-worker"].Publish(pctx, schemas.EpisodeScored.For("r1"), "forged", sc)
	pcancel()
	if err == nil {
		t.Fatal("the llm-worker's nkey published a score")
	}
	if err := conns["verifier"].Publish(ctx, schemas.EpisodeScored.For("r1"), "real", sc); err != nil {
		t.Fatalf("the verifier's nkey could not publish a score: %v", err)
	}
	if n := streamMsgsOf(t, ctx, conns["admin"], schemas.StreamScores); n != 1 {
		t.Fatalf("scores stream holds %d messages, want the verifier's 1", n)
	}
}

// TestDeployNATSAuthEnvServer runs the environment server as deploy/nats's
// env-server user, with the sandbox-worker and verifier as theirs: a
// session over the API runs code in the sandbox, is checked and scored,
// and its row is stored, without one permission violation; and the same
// user is refused what other roles do (publish a score, request an
// episode, submit a run, write the llm-worker's episode state).
func TestDeployNATSAuthEnvServer(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	url, pw := startDeployNATS(t, false)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conns := provisionAndConnect(t, ctx, url, pw, log, "dispatcher", "sandbox-worker", "verifier", "env-server")
	canary := "MEDGYM-CANARY-auth-env"
	lib := canaryLibrary(t, canary)
	f := baseFlags(t)
	f.Library = lib
	goServices(t, ctx, f, func(name string) *bus.Conn { return conns[name] }, nil, slog.New(slog.DiscardHandler), tasks.AgentTree(lib), "llm-worker")

	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "eicu", Split: "test", DataRoot: f.Data, LibraryDir: lib})
	if err != nil || len(ts) == 0 {
		t.Fatalf("canary tasks: %d, %v", len(ts), err)
	}
	views := t.TempDir()
	var vs []schemas.TaskView
	for _, tk := range ts {
		vs = append(vs, tk.View)
	}
	if err := env.WriteViews(views, "eicu", "test", vs); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	ectx, estop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- env.Run(ectx, conns["env-server"], env.Config{Addr: "127.0.0.1:0", Views: views, Worker: "env",
			Ready: func(a string) { addr <- a }}, log.With("service", "env"))
	}()
	t.Cleanup(func() { estop(); <-done })
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("the env server could not start as env-server: %v\n%s", err, logs.String())
	}
	before := strings.Count(logs.String(), "Permissions Violation")
	chk, err := apitest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, chk, base)
	sess := c.must(201, "POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": "auth-env", "max_turns": 3}})
	step := "/v1/sessions/" + sess["session_id"].(string) + "/step"
	r := c.must(200, "POST", step, map[string]any{"turn": 0, "content": act("validate_code", map[string]any{"code": fmt.Sprintf("print(%q)", canary)})})
	if r["done"] != true {
		r = c.must(200, "POST", step, map[string]any{"turn": 1, "content": act("answer", map[string]any{"answer": canary})})
	}
	if info := r["info"].(map[string]any); r["done"] != true || info["outcome"] != "correct" || r["reward"] != 1.0 {
		t.Fatalf("the episode as env-server: %v\n%s", r, logs.String())
	}
	rows := readRun(t, ctx, f.Store, "auth-env")
	if len(rows) != 1 || rows[0].Outcome != string(schemas.OutcomeCorrect) {
		t.Fatalf("stored rows: %+v", rows)
	}
	if after := strings.Count(logs.String(), "Permissions Violation"); after != before {
		t.Fatalf("the env server ran into %d permission violations:\n%s", after-before, logs.String())
	}

	// Another role's subjects: refused, each with its violation logged.
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	err = conns["env-server"].Publish(pctx, schemas.EpisodeScored.For("r9"), "forged", schemas.Score{RunID: "r9", EpisodeID: "e9", Outcome: schemas.OutcomeCorrect, Reward: 1})
	pcancel()
	if err == nil {
		t.Fatal("the env-server user published a score")
	}
	others := []string{schemas.EpisodeRequested.For("y"), schemas.RunSubmitted.For("y"), "$KV." + schemas.BucketEpisodes + ".y"}
	for _, subj := range others {
		if err := conns["env-server"].PublishCore(subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, subj := range append(others, schemas.EpisodeScored.For("r9")) {
		for !strings.Contains(logs.String(), "Permissions Violation for Publish to \\\""+subj) &&
			!strings.Contains(logs.String(), `Permissions Violation for Publish to "`+subj) {
			if time.Now().After(deadline) {
				t.Fatalf("no permission violation logged for env-server's publish to %s:\n%s", subj, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	checkContract(t, chk, "") // the agent printed the answer itself: no canary search here
}
