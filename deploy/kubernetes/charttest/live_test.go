package charttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// repoRoot is the medgym checkout this module sits in.
const repoRoot = "../../.."

// TestNamesOnLiveMetrics runs the real services as the chart runs them (one
// process per service, each with its own /metrics, against a nats-server
// with JetStream), plays a run through them and scrapes every /metrics: each
// metric the chart and the dashboard query is exported, and each
// ScaledObject's stream and consumer is a consumer the service it scales
// reads (its medgym_queue_depth series), and each durable the NATS
// permissions name is one some service reads. Every flag the chart passes a
// service is one the binary takes.
func TestNamesOnLiveMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the services")
	}
	ms := render(t)
	u, err := CollectUses(ms, dashboard(t))
	if err != nil {
		t.Fatal(err)
	}
	natsServer := findTool(t, "nats-server")
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./services/dispatcher", "./services/llm-worker",
		"./services/sandbox-worker", "./services/verifier", "./cmd/medgym")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The flags the chart gives each service are the binary's.
	for _, svc := range Services {
		d := Deployment(ms, svc)
		c := d.Spec.Template.Spec.Containers[0]
		if len(c.Command) != 1 || c.Command[0] != svc {
			t.Errorf("%s: command %v, want [%s]", svc, c.Command, svc)
			continue
		}
		help, _ := exec.Command(filepath.Join(bin, svc), "-h").CombinedOutput()
		for _, a := range c.Args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if strings.HasPrefix(a, "-") && !strings.Contains(string(help), "\n  -"+name+" ") && !strings.Contains(string(help), "\n  -"+name+"\n") {
				t.Errorf("%s: the chart passes %s, which %s -h does not list", svc, a, svc)
			}
		}
	}
	if t.Failed() {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// The sandbox's uid 65534 must reach its workspaces under dir.
	must(t, os.Chmod(filepath.Dir(dir), 0o711))
	must(t, os.Chmod(dir, 0o711))
	natsPort := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	var procs []*proc
	procs = append(procs, start(t, dir, "nats-server", natsServer, "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(natsPort), "-sd", filepath.Join(dir, "js")))
	waitTCP(t, ctx, fmt.Sprintf("127.0.0.1:%d", natsPort))

	lib := os.Getenv("MEDGYM_LIBRARY")
	if lib == "" {
		lib = filepath.Join(dir, "library")
		must(t, os.MkdirAll(filepath.Join(lib, "agent"), 0o755))
		must(t, os.MkdirAll(filepath.Join(lib, "verifier"), 0o755))
	}
	data, _ := filepath.Abs(tasks.DataRoot())
	store := filepath.Join(dir, "store")
	work := filepath.Join(dir, "work")
	must(t, os.MkdirAll(work, 0o755))
	addr := map[string]string{}
	args := map[string][]string{
		"dispatcher":     {"--data", data, "--library", lib},
		"llm-worker":     {"--data", data, "--library", lib, "--concurrency", "4"},
		"sandbox-worker": {"--agent-tree", filepath.Join(lib, "agent"), "--backend", "bwrap", "--work-root", work, "--warm", "1", "--concurrency", "2"},
		"verifier":       {"--data", data, "--library", lib, "--store", store},
	}
	for _, svc := range Services {
		addr[svc] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		a := append([]string{"--nats", url, "--metrics", addr[svc], "--metrics-required"}, args[svc]...)
		procs = append(procs, start(t, dir, svc, filepath.Join(bin, svc), a...))
	}
	for _, svc := range Services {
		waitTCP(t, ctx, addr[svc])
	}
	// A service that exits (a bad flag, a work root it cannot use) would
	// hang the run: stop the run then and say which.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() {
		for runCtx.Err() == nil {
			for _, p := range procs {
				select {
				case <-p.done:
					t.Errorf("%s exited during the run (its log follows at the end)", p.name)
					stopRun()
					return
				default:
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	const runID = "charttest"
	run := exec.CommandContext(runCtx, filepath.Join(bin, "medgym"), "run", "--nats", url, "--run-id", runID,
		"--dataset", "medcalcbench", "--split", "test", "--limit", "4", "--policy", "reference", "--store", store)
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("medgym run: %v\n%s", err, out)
	}
	// One junk message (a body no handler can use) for the junk counter.
	conn, err := bus.Connect(ctx, url, "charttest", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	must(t, conn.PublishRaw(ctx, schemas.EpisodeScored.For(runID), []byte("not a score")))

	// The consumer gauges are polled every 2 s and the junk count follows
	// the message: scrape until the names are there or the time is up.
	var errs []error
	for {
		pages := map[string]string{}
		for _, svc := range Services {
			pages[svc] = scrape(t, ctx, addr[svc])
		}
		if errs = CheckScrape(u, pages); len(errs) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after the run:\n%v", errors.Join(errs...))
		}
		time.Sleep(500 * time.Millisecond)
	}
	// /healthz, the probes' target, answers on the same address.
	for _, svc := range Services {
		resp, err := http.Get("http://" + addr[svc] + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s /healthz: %s", svc, resp.Status)
		}
	}
	t.Logf("checked %d metrics, %d lag triggers and %d permission subjects against live /metrics of %v",
		len(u.Metrics), len(u.Lags), len(u.Subjects), Services)
}

// findTool finds a tool scripts/setup.sh installs: $MEDGYM_TOOLS, the cache
// it installs to, or PATH.
func findTool(t *testing.T, name string) string {
	t.Helper()
	home, _ := os.UserHomeDir()
	for _, d := range []string{os.Getenv("MEDGYM_TOOLS"), filepath.Join(home, ".cache", "medgym", "bin")} {
		if d == "" {
			continue
		}
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found ($MEDGYM_TOOLS, ~/.cache/medgym/bin, PATH): make setup installs it", name)
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a process the test started; done closes when it exits.
type proc struct {
	name string
	done chan struct{}
}

// start runs a process until the test ends (SIGTERM, then a wait), its
// output in dir/<name>.log, printed when the test failed.
func start(t *testing.T, dir, name, path string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p := &proc{name: name, done: done}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
	return p
}

func waitTCP(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func scrape(t *testing.T, ctx context.Context, addr string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
