package systemtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"os"
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
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/store/miniotest"
	"github.com/medgym/medgym/tasks"
)

// netLab is a set of network namespaces ("hosts") joined by a bridge in the
// test's own namespace, which has the bridge's address .1 and so reaches
// every host. Nothing routes off the bridge: no traffic leaves the machine.
type netLab struct {
	t      testing.TB
	id     string // short random tag in every name, so parallel runs never meet
	subnet string // "10.231.X"
	bridge string
	hosts  map[string]int // namespace → last octet
}

func run1(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNetLab makes the bridge, or skips the test where it cannot (not root,
// no ip(8)).
func newNetLab(t testing.TB) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the cluster test makes network namespaces: run it as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the cluster test needs ip(8) (iproute2)")
	}
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	l := &netLab{t: t, id: hex.EncodeToString(b), hosts: map[string]int{}}
	l.subnet = fmt.Sprintf("10.231.%d", 1+int(b[0])%250)
	if out, _ := exec.Command("ip", "-br", "addr").Output(); strings.Contains(string(out), l.subnet+".") {
		t.Skipf("subnet %s.0/24 is in use here", l.subnet)
	}
	l.bridge = "mgb" + l.id
	run1(t, "ip", "link", "add", l.bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", l.bridge).Run() })
	run1(t, "ip", "addr", "add", l.subnet+".1/24", "dev", l.bridge)
	run1(t, "ip", "link", "set", l.bridge, "up")
	// Hosts with bridge netfilter on (Docker's) send bridged frames through
	// FORWARD, whose policy Docker sets to DROP: let this bridge's through.
	if _, err := exec.LookPath("iptables"); err == nil {
		rule := []string{"FORWARD", "-i", l.bridge, "-o", l.bridge, "-j", "ACCEPT"}
		if exec.Command("iptables", append([]string{"-I"}, rule...)...).Run() == nil {
			t.Cleanup(func() { _ = exec.Command("iptables", append([]string{"-D"}, rule...)...).Run() })
		}
	}
	return l
}

// host makes namespace name with address .octet on the bridge.
func (l *netLab) host(name string, octet int) string {
	ns := "mg" + l.id + "-" + name
	veth := fmt.Sprintf("mg%sh%d", l.id, octet)
	run1(l.t, "ip", "netns", "add", ns)
	l.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run1(l.t, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	run1(l.t, "ip", "link", "set", veth, "master", l.bridge, "up")
	run1(l.t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("%s.%d/24", l.subnet, octet), "dev", "eth0")
	run1(l.t, "ip", "-n", ns, "link", "set", "eth0", "up")
	run1(l.t, "ip", "-n", ns, "link", "set", "lo", "up")
	l.hosts[ns] = octet
	return ns
}

func (l *netLab) addr(ns string) string { return fmt.Sprintf("%s.%d", l.subnet, l.hosts[ns]) }

// link takes a host off the bridge (down) or puts it back.
func (l *netLab) link(ns string, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	run1(l.t, "ip", "link", "set", fmt.Sprintf("mg%sh%d", l.id, l.hosts[ns]), state)
}

// in prefixes a command to run in namespace ns ("" = the test's own) with env.
func in(ns string, env []string, cmd ...string) []string {
	var pre []string
	if ns != "" {
		pre = []string{"ip", "netns", "exec", ns}
	}
	pre = append(pre, "env")
	pre = append(pre, env...)
	return append(pre, cmd...)
}

// timeline records what the test did when, for the log.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	lines []string
}

func (tl *timeline) add(format string, a ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.lines = append(tl.lines, fmt.Sprintf("%7.1fs  %s", time.Since(tl.start).Seconds(), fmt.Sprintf(format, a...)))
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.lines, "\n")
}

// clusterPasswordEnv gives every user of deploy/nats/auth.conf the password
// "test", as nats-server reads them.
func clusterPasswordEnv(t testing.TB) []string {
	var env []string
	for _, v := range bustest.DeployPasswordVars(t, filepath.Join(repoRoot(t), "deploy/nats/auth.conf")) {
		env = append(env, v+"=test")
	}
	return env
}

// scrapeInFlight sums medgym_messages_in_flight on a /metrics page.
func scrapeInFlight(addr string) float64 {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "medgym_messages_in_flight{") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil && !math.IsNaN(v) {
			sum += v
		}
	}
	return sum
}

// streamState is a stream's replica count, leader, and its followers'
// state: whether each is online and current.
func streamState(ctx context.Context, conn *bus.Conn, name string) (replicas int, leader, followers string, settled bool, err error) {
	p, err := conn.StreamPlacement(ctx, name)
	if err != nil {
		return 0, "", "", false, err
	}
	if p.Cluster == "" {
		return p.Replicas, "", "", false, nil
	}
	settled = p.Leader != "" && len(p.Followers) == p.Replicas-1
	var fs []string
	for _, r := range p.Followers {
		settled = settled && !r.Offline
		fs = append(fs, fmt.Sprintf("%s(current=%v offline=%v lag=%d)", r.Name, r.Current, r.Offline, r.Lag))
	}
	return p.Replicas, p.Leader, strings.Join(fs, " "), settled, nil
}

// TestClusterAcrossHosts (issue 17): three nats-servers run from
// deploy/nats/cluster.conf, each in its own network namespace, with
// authorisation on; two worker hosts (an llm-worker and a sandbox-worker
// each) in two more; the dispatcher, the verifier (writing to a real MinIO)
// and `medgym run --nats n1,n2,n3 --replicas 3` in the test's own. During a
// run of 500 episodes against a fake model with latency (most answer
// without running code) the test checks R3 from stream info, kills -9 the
// episodes stream's leader and brings it back, cuts a worker host that
// holds unacked work off the network for 20 s, and restarts the three
// nodes one at a time. Every episode is stored exactly once with an
// outcome, and nobody helps the run along.
func TestClusterAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: a NATS cluster across network namespaces, ~3 minutes")
	}
	const episodes = 500
	natsBin := natsServerBinary(t)
	lab := newNetLab(t)
	bin := buildBinaries(t)
	data := dataRoot(t)
	tl := &timeline{start: time.Now()}
	defer func() { t.Logf("timeline:\n%s", tl) }()

	work, err := os.MkdirTemp("", "medgym-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(work, 0o755); err != nil { // sandboxes run as uid 65534
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(work) })
	logf, err := os.Create(filepath.Join(work, "cluster.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			var services, servers strings.Builder
			for line := range strings.Lines(string(b)) {
				if strings.HasPrefix(line, "[") { // nats-server's own lines: [pid] time [LVL] ...
					servers.WriteString(line)
				} else {
					services.WriteString(line)
				}
			}
			t.Logf("medgym processes' logs (tail):\n%s\nnats-servers' logs (tail):\n%s", tail(services.String(), 8000), tail(servers.String(), 3000))
		}
	}()

	// The three NATS hosts.
	conf := filepath.Join(repoRoot(t), "deploy", "nats", "cluster.conf")
	nodes := map[string]*proc{}
	var names, seeds, routes []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("n%d", i)
		ns := lab.host(name, 10+i)
		names = append(names, name)
		seeds = append(seeds, "nats://"+lab.addr(ns)+":4222")
		routes = append(routes, fmt.Sprintf("NATS_ROUTE_%d=nats-route://route:route-test@%s:6222", i, lab.addr(ns)))
	}
	for _, name := range names {
		ns := "mg" + lab.id + "-" + name
		env := append([]string{"NATS_SERVER_NAME=" + name, "NATS_CLIENT_LISTEN=" + lab.addr(ns) + ":4222",
			"NATS_CLUSTER_LISTEN=" + lab.addr(ns) + ":6222", "NATS_ROUTE_PASSWORD=route-test",
			"NATS_STORE_DIR=" + filepath.Join(work, name)}, routes...)
		env = append(env, clusterPasswordEnv(t)...)
		nodes[name] = &proc{t: t, name: name, log: logf, args: in(ns, env, natsBin, "-c", conf)}
		nodes[name].start()
	}
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	seedURL := strings.Join(seeds, ",")
	tl.add("3 nats-servers started in namespaces n1..n3 (%s)", seedURL)

	// MinIO and the fake model, in the test's namespace; the model listens
	// on the bridge so the worker hosts reach it.
	endpoint, access, secret, _, _ := miniotest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	answer := fakellm.New(fakellm.Config{Script: []string{actionJSON("answer", "answer", "42")}, LatencyMean: time.Second, LatencyJitter: 200 * time.Millisecond, Model: "fake"})
	code := fakellm.New(fakellm.Config{Script: []string{actionJSON("validate_code", "code", "print(42)"), actionJSON("answer", "answer", "42")},
		LatencyMean: time.Second, LatencyJitter: 200 * time.Millisecond, Model: "fake"})
	ln, err := net.Listen("tcp", lab.subnet+".1:0")
	if err != nil {
		t.Fatal(err)
	}
	llm := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h := fnv.New32a()
		io.WriteString(h, episodeOf(body))
		if h.Sum32()%5 == 0 { // a fifth run code in the sandbox first
			code.ServeHTTP(w, r)
			return
		}
		answer.ServeHTTP(w, r)
	})}
	go func() { _ = llm.Serve(ln) }()
	defer llm.Close()
	llmURL := "http://" + ln.Addr().String() + "/v1"

	// The services: workers on two hosts, dispatcher and verifier here.
	storeURL := "s3://medgym-cluster/runs"
	library := filepath.Join(work, "library")
	if err := os.MkdirAll(tasks.AgentTree(library), 0o755); err != nil {
		t.Fatal(err)
	}
	svcEnv := func(user string) []string {
		return []string{"MEDGYM_NATS_USER=" + user, "MEDGYM_NATS_PASSWORD=test", "MEDGYM_REPLICAS=3",
			"AWS_ACCESS_KEY_ID=" + access, "AWS_SECRET_ACCESS_KEY=" + secret}
	}
	common := []string{"--nats", seedURL}
	services := map[string]*proc{}
	mk := func(name, ns, user string, args ...string) {
		cmd := append([]string{filepath.Join(bin, strings.TrimRight(name, "0123456789"))}, append(common, args...)...)
		services[name] = &proc{t: t, name: name, log: logf, args: in(ns, svcEnv(user), cmd...)}
	}
	var workerHosts []string
	for i := 1; i <= 2; i++ {
		ns := lab.host(fmt.Sprintf("w%d", i), 20+i)
		workerHosts = append(workerHosts, ns)
		wr := filepath.Join(work, fmt.Sprintf("sandboxes-%d", i))
		if err := os.MkdirAll(wr, 0o755); err != nil {
			t.Fatal(err)
		}
		mk(fmt.Sprintf("llm-worker%d", i), ns, "llm-worker", "--data", data, "--library", library, "--concurrency", "2", "--ack-wait", "4s",
			"--llm-max-concurrent", "2", "--metrics", lab.addr(ns)+":9102")
		mk(fmt.Sprintf("sandbox-worker%d", i), ns, "sandbox-worker", "--agent-tree", tasks.AgentTree(library), "--work-root", wr, "--ack-wait", "4s", "--metrics", "")
	}
	mk("dispatcher", "", "dispatcher", "--data", data, "--library", library, "--metrics", "")
	mk("verifier", "", "verifier", "--data", data, "--library", library, "--store", storeURL, "--s3-endpoint", endpoint,
		"--s3-insecure", "--concurrency", "8", "--ack-wait", "4s", "--metrics", "")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Services start once the cluster has elected its meta leader: until
	// then JetStream does not answer, and a service exits on that.
	var admin *bus.Conn
	for admin == nil {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		admin, err = bus.Connect(cctx, seedURL, "cluster-test", cli.NewLogger(io.Discard, "error"), bus.WithAuth(bus.Auth{User: "admin", Password: "test"}))
		ccancel()
		if err != nil && ctx.Err() != nil {
			t.Fatalf("the cluster never answered: %v", err)
		}
	}
	defer admin.Close()
	tl.add("JetStream cluster answers")
	// The operator provisions the streams, buckets and durable consumers
	// at R3 (`medgym nats provision --replicas 3`, as an install does);
	// the services, each with its own user, only verify them.
	for err = errors.New("not yet"); err != nil; {
		if err = bus.Provision(ctx, admin, bus.StreamOptions{Replicas: 3}); err != nil && ctx.Err() != nil {
			t.Fatalf("streams at R3: %v", err)
		}
	}
	tl.add("streams and buckets created at R3")
	for _, p := range services {
		p.onExit = func(name string, err error) {
			t.Errorf("%s exited on its own: %v", name, err)
			cancel()
		}
		p.start()
	}
	defer func() {
		for _, p := range services {
			p.stop()
		}
	}()
	tl.add("services started: llm-worker and sandbox-worker on hosts w1, w2; dispatcher and verifier here")

	// The run, as a user would submit it, and an admin connection to watch.
	t.Setenv("MEDGYM_NATS_USER", "client")
	t.Setenv("MEDGYM_NATS_PASSWORD", "test")
	f := baseFlags(t)
	f.NATS, f.Store, f.Library = seedURL, storeURL, library
	f.Verifier.StoreOptions.Endpoint, f.Verifier.StoreOptions.UseSSL = endpoint, false
	f.Streams.Replicas = 3
	f.Policy, f.LLMURL, f.Model = "openai", llmURL, "fake"
	f.Limit, f.Samples, f.RunID, f.MaxInFlight = episodes/2, 2, "cluster", 64
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}

	chaos := make(chan error, 1)
	runDone := make(chan struct{})
	go func() { chaos <- clusterChaos(ctx, lab, admin, nodes, workerHosts, tl, runDone) }()
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	close(runDone)
	tl.add("run finished: %d episodes, outcomes %v", res.Total, res.Outcomes)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-chaos; err != nil {
		t.Fatal(err)
	}
	if res.Total != episodes {
		t.Fatalf("run has %d episodes, want %d", res.Total, episodes)
	}
	// Exactly once across the store's files (DuckDB over the raw Parquet),
	// each with an outcome.
	out, _, err := runCLI(t, "query", "--store", storeURL, "--s3-endpoint", endpoint, "--s3-insecure", "--format", "csv",
		"SELECT count(*) AS n, count(DISTINCT episode_id) AS e, count(*) FILTER (WHERE outcome IS NULL OR outcome = '' OR outcome = 'infra_failure') AS bad FROM trajectories WHERE run_id = 'cluster'")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d,%d,0", episodes, episodes); !strings.Contains(out, want) {
		t.Fatalf("store: %q; want %s (n, distinct episodes, without an outcome)", out, want)
	}
	tl.add("store: %d rows, %d distinct episodes, each with an outcome", episodes, episodes)
}

// clusterChaos runs the faults as the run passes milestones: R3 checked,
// kill -9 of the episodes stream's leader and its restart, a worker host
// with unacked work cut off for 20 s, a rolling restart of the nodes.
func clusterChaos(ctx context.Context, lab *netLab, js *bus.Conn, nodes map[string]*proc, workerHosts []string, tl *timeline, runDone <-chan struct{}) error {
	// Each request gets its own timeout: one sent as the admin connection
	// loses its node would otherwise wait for the test's deadline.
	scored := func() int {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return done(c, js, "cluster")
	}
	state := func(stream string) (int, string, string, bool, error) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return streamState(c, js, stream)
	}
	wait := func(n int) error {
		for scored() < n {
			select {
			case <-ctx.Done():
				return fmt.Errorf("run stalled before %d episodes", n)
			case <-runDone:
				return fmt.Errorf("the run finished before the fault plan reached %d episodes", n)
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	}
	// Back to R3 with a leader and every follower current.
	// node is back: the episodes stream has a leader, and node leads it
	// or follows it current (caught up).
	settled := func(what, node string) error {
		var last string
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			_, leader, fs, ok, err := state(schemas.StreamEpisodes)
			last = fmt.Sprintf("leader %q, followers %s, err %v", leader, fs, err)
			if ok && (leader == node || strings.Contains(fs, node+"(current=true offline=false")) {
				tl.add("%s: %s", what, last)
				return nil
			}
		}
		return fmt.Errorf("%s: never caught up: %s", what, last)
	}
	if err := wait(30); err != nil {
		return err
	}
	for _, s := range []string{schemas.StreamEpisodes, schemas.StreamScores, "KV_" + schemas.BucketEpisodes} {
		r, leader, _, _, err := state(s)
		if err != nil || r != 3 {
			return fmt.Errorf("stream %s: R%d (%v), want R3", s, r, err)
		}
		tl.add("stream %s is R3, leader %s", s, leader)
	}

	_, leader, _, _, err := state(schemas.StreamEpisodes)
	if err != nil || nodes[leader] == nil {
		return fmt.Errorf("episodes stream leader %q: %v", leader, err)
	}
	before := scored()
	nodes[leader].kill()
	tl.add("kill -9 %s (episodes stream leader) at %d scored", leader, before)
	time.Sleep(5 * time.Second)
	nodes[leader].start()
	tl.add("%s restarted", leader)
	if err := settled(leader+" back and current after the kill", leader); err != nil {
		return err
	}

	if err := wait(100); err != nil {
		return err
	}
	var cut string
	for cut == "" {
		for _, ns := range workerHosts {
			if scrapeInFlight(lab.addr(ns)+":9102") > 0 {
				cut = ns
				break
			}
		}
		select {
		case <-runDone:
			return fmt.Errorf("no worker host held unacked work before the run finished")
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
	before = scored()
	lab.link(cut, false)
	tl.add("host %s (llm-worker with work in flight) cut off the network at %d scored", cut, before)
	time.Sleep(20 * time.Second)
	lab.link(cut, true)
	tl.add("host %s back on the network at %d scored", cut, scored())

	if err := wait(170); err != nil {
		return err
	}
	for _, name := range []string{"n1", "n2", "n3"} {
		before = scored()
		nodes[name].stop()
		tl.add("rolling restart: %s stopped at %d scored", name, before)
		nodes[name].start()
		if err := settled("rolling restart: "+name+" back and current", name); err != nil {
			return err
		}
	}
	return nil
}
