package systemtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/tasks"
)

// composeBinary finds the Compose v2 binary scripts/setup.sh builds
// (WITH_DOCKER=1) into the tools folder.
func composeBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(toolsDir(), "docker-compose")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Compose v2 not found at %s: run WITH_DOCKER=1 scripts/setup.sh", p)
	}
	return p
}

// composeProject runs one compose project of deploy/compose/compose.yaml.
type composeProject struct {
	t       *testing.T
	bin     string
	file    string
	name    string
	env     []string
	secrets string
}

func (c *composeProject) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--ansi", "never", "-p", c.name, "-f", c.file}, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("compose %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// containers lists the ids of a service's containers.
func (c *composeProject) containers(ctx context.Context, service string) []string {
	c.t.Helper()
	out, err := c.run(ctx, "ps", "-q", service)
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.Fields(out)
}

// composeSecrets writes the secret files the compose file reads (README.md
// there) into a folder of the test's, readable by the services' uid 65534.
func composeSecrets(t *testing.T) (dir string, pw func(user string) string) {
	t.Helper()
	dir = sandboxReachableDir(t)
	random := func() string {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	users := map[string]string{}
	var conf strings.Builder
	for _, u := range []string{"dispatcher", "llm_worker", "sandbox_worker", "verifier", "env_server", "client", "trainer", "admin"} {
		users[u] = random()
		fmt.Fprintf(&conf, "MEDGYM_NATS_PASSWORD_%s: %q\n", strings.ToUpper(u), users[u])
	}
	files := map[string]string{"minio_root_user": "medgym", "minio_root_password": random(), "openai_api_key": "",
		"nats_passwords.conf": conf.String()}
	for u, p := range users {
		files["nats_"+u] = p
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, func(user string) string { return files[user] }
}

// TestComposeDeploy (issue 17): deploy/compose/compose.yaml as a user runs
// it, with images built here (scripts/compose-images.sh: nats-server and
// MinIO FROM scratch, the services on the sandbox image) and Compose v2
// built from its Go module (setup.sh): `up` with two llm-workers and two
// sandbox-workers, a run submitted from the host with `medgym run --nats`
// as the client user (passwords from the secret files, as
// deploy/nats/auth.conf wants), every episode stored exactly once in the
// compose MinIO with an outcome, each worker replica having handled work,
// and `down` removing it all. The reference policy runs Python in the
// sandbox-workers' bubblewrap sandboxes inside their containers, so the
// security options the compose file gives them are what lets the run
// finish. Run by `make test-compose` (MEDGYM_COMPOSE=1; ~2 minutes once
// the images are cached).
func TestComposeDeploy(t *testing.T) {
	if os.Getenv("MEDGYM_COMPOSE") != "1" {
		t.Skip("the compose deployment test runs in its own stage: make test-compose (MEDGYM_COMPOSE=1)")
	}
	const episodes = 40
	compose := composeBinary(t)
	root := repoRoot(t)
	bin := buildBinaries(t)
	library := os.Getenv("MEDGYM_LIBRARY")
	if library == "" {
		library = filepath.Join(root, "build", "library")
	}
	// Compose reads a relative path as relative to the compose file.
	library, err := filepath.Abs(library)
	if err != nil {
		t.Fatal(err)
	}
	data, err := filepath.Abs(dataRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tasks.AgentTree(library), "AGENT_TREE.json")); err != nil {
		t.Fatalf("no task library at %s (make library): %v", library, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The image carries the CLI too: the nats-provision service runs
	// `medgym nats provision` as the admin user before the services verify.
	if out, err := exec.CommandContext(ctx, "go", "build", "-C", root, "-o", filepath.Join(bin, "medgym"), "./cmd/medgym").CombinedOutput(); err != nil {
		t.Fatalf("build medgym: %v\n%s", err, out)
	}
	images := exec.CommandContext(ctx, filepath.Join(root, "scripts", "compose-images.sh"), bin)
	images.Stderr = os.Stderr
	out, err := images.Output()
	if err != nil {
		t.Fatalf("scripts/compose-images.sh: %v", err)
	}
	var env []string
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "MEDGYM_") && strings.Contains(sc.Text(), "_IMAGE=") {
			env = append(env, sc.Text())
		}
	}
	if len(env) != 3 {
		t.Fatalf("compose-images.sh printed %q; want three image variables", out)
	}
	secrets, pw := composeSecrets(t)
	port := func() string { _, p, _ := net.SplitHostPort(freeAddr(t)); return p }
	natsPort, minioPort := port(), port()
	env = append(env, "MEDGYM_COMPOSE_SECRETS="+secrets, "MEDGYM_LIBRARY="+library, "MEDGYM_DATA="+data,
		"MEDGYM_NATS_PORT="+natsPort, "MEDGYM_MINIO_PORT="+minioPort)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	c := &composeProject{t: t, bin: compose, file: filepath.Join(root, "deploy", "compose", "compose.yaml"),
		name: "medgymtest" + hex.EncodeToString(b), env: env, secrets: secrets}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		if t.Failed() {
			logs, _ := c.run(dctx, "logs", "--no-color", "--tail", "40")
			t.Logf("compose logs (tail):\n%s", logs)
		}
		if _, err := c.run(dctx, "down", "-v", "--remove-orphans", "--timeout", "10"); err != nil {
			t.Errorf("compose down: %v", err)
		}
	})

	start := time.Now()
	if _, err := c.run(ctx, "up", "-d", "--scale", "llm-worker=2", "--scale", "sandbox-worker=2"); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"nats": 1, "minio": 1, "dispatcher": 1, "llm-worker": 2, "sandbox-worker": 2, "verifier": 1}
	for svc, n := range want {
		if got := len(c.containers(ctx, svc)); got != n {
			t.Fatalf("%s: %d containers, want %d", svc, got, n)
		}
	}
	// Each service says it runs once NATS answers (a service that started
	// before NATS exits and is restarted by its restart policy); one that
	// still does not run after two minutes (a sandbox-worker whose
	// bubblewrap cannot work in its container exits at every start) fails
	// the test with its log.
	deadline := time.Now().Add(2 * time.Minute)
	for svc := range want {
		if svc == "nats" || svc == "minio" {
			continue
		}
		for _, id := range c.containers(ctx, svc) {
			for {
				logs, _ := exec.CommandContext(ctx, "docker", "logs", id).CombinedOutput()
				if bytes.Contains(logs, []byte(`msg="`+svc+` running"`)) {
					break
				}
				if ctx.Err() != nil || time.Now().After(deadline) {
					t.Fatalf("%s (%s) not running 2 minutes after compose up:\n%s", svc, id[:12], tail(string(logs), 3000))
				}
				time.Sleep(time.Second)
			}
		}
	}
	t.Logf("compose up: %d containers running in %s", 8, time.Since(start).Round(time.Second))

	// The run, from the host, as a user: the client's NATS password, the
	// MinIO credentials, both through the published loopback ports. A
	// third of the episodes in flight at once, so that every worker replica
	// keeps asking for work while there is some.
	t.Setenv("MEDGYM_NATS_USER", "client")
	t.Setenv("MEDGYM_NATS_PASSWORD", pw("nats_client"))
	t.Setenv("AWS_ACCESS_KEY_ID", pw("minio_root_user"))
	t.Setenv("AWS_SECRET_ACCESS_KEY", pw("minio_root_password"))
	natsURL := "nats://127.0.0.1:" + natsPort
	minio := "127.0.0.1:" + minioPort
	const storeURL = "s3://trajectories/medgym"
	stdout, stderr, err := runCLI(t, "run", "--nats", natsURL, "--run-id", "compose", "--dataset", "medcalcbench", "--split", "test",
		"--limit", strconv.Itoa(episodes), "--max-in-flight", "8", "--policy", "reference", "--library", library, "--data", data,
		"--store", storeURL, "--s3-endpoint", minio, "--s3-insecure", "--quiet")
	if err != nil {
		t.Fatalf("medgym run: %v\n%s\n%s", err, stdout, stderr)
	}
	t.Logf("medgym run --nats:\n%s", stdout)

	// Exactly once, each with an outcome, and solved: the reference
	// solutions ran in the sandbox-workers' bubblewrap sandboxes.
	q, _, err := runCLI(t, "query", "--store", storeURL, "--s3-endpoint", minio, "--s3-insecure", "--format", "csv",
		"SELECT count(*) AS n, count(DISTINCT episode_id) AS e, count(*) FILTER (WHERE outcome IS NULL OR outcome = '' OR outcome = 'infra_failure') AS bad, "+
			"count(*) FILTER (WHERE outcome = 'sandbox_error') AS sb, count(*) FILTER (WHERE outcome = 'correct') AS ok FROM trajectories WHERE run_id = 'compose'")
	if err != nil {
		t.Fatal(err)
	}
	if w := fmt.Sprintf("%d,%d,0,0,%d", episodes, episodes, episodes); !strings.Contains(q, w) {
		t.Fatalf("compose MinIO: %q; want %s (rows, distinct episodes, without an outcome, sandbox errors, solved)", q, w)
	}

	// Every replica of each worker kind took part: its own /metrics
	// (scraped from inside its container, on its own address) counts
	// messages it acked.
	for _, w := range []struct{ svc, addr string }{{"llm-worker", "llm-worker:9102"}, {"sandbox-worker", "sandbox-worker:9103"}} {
		for _, id := range c.containers(ctx, w.svc) {
			n := scrapeAcked(t, ctx, id, w.addr)
			if n == 0 {
				t.Errorf("%s %s handled no message: the replicas do not share the work", w.svc, id[:12])
			}
			t.Logf("%s %s: %d messages acked", w.svc, id[:12], n)
		}
	}
	t.Logf("compose deployment: up, run of %d episodes, checked in %s", episodes, time.Since(start).Round(time.Second))
}

// scrapeAcked reads the messages a container's service acked from its
// /metrics, fetched inside the container (the image's Python).
func scrapeAcked(t *testing.T, ctx context.Context, id, addr string) int {
	t.Helper()
	out, err := exec.CommandContext(ctx, "docker", "exec", id, "python3", "-c",
		"import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
		"http://"+addr+"/metrics").CombinedOutput()
	if err != nil {
		t.Fatalf("scrape %s in %s: %v\n%s", addr, id[:12], err, out)
	}
	return ackedIn(string(out))
}
