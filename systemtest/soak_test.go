package systemtest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/miniotest"
	"github.com/medgym/medgym/store/query"
	"github.com/medgym/medgym/tasks"
)

// soakConfig is TestSoak's shape, read from the environment (docs/soak.md).
type soakConfig struct {
	seed     uint64
	episodes int    // over all runs
	runs     int    // concurrent runs
	store    string // dir or minio
	faults   int
	schedule string // a printed schedule to replay, or empty
	attacks  int    // percent of tasks whose episodes replay an attack
	slow     int    // slow HTTP clients against the environment server (0: no server)
	latency  time.Duration
	ackWait  time.Duration
	timeout  time.Duration
}

func soakConfigFromEnv(t *testing.T) soakConfig {
	t.Helper()
	c := soakConfig{seed: 1, episodes: 200, runs: 2, store: "dir", faults: 6, attacks: 20, slow: 100,
		latency: 200 * time.Millisecond, ackWait: 3 * time.Second}
	num := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a count", name, v)
			}
			*dst = n
		}
	}
	if v := os.Getenv("MEDGYM_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("MEDGYM_SOAK_SEED=%q: %v", v, err)
		}
		c.seed = n
	}
	num("MEDGYM_SOAK_EPISODES", &c.episodes)
	num("MEDGYM_SOAK_RUNS", &c.runs)
	num("MEDGYM_SOAK_FAULTS", &c.faults)
	num("MEDGYM_SOAK_ATTACKS", &c.attacks)
	num("MEDGYM_SOAK_SLOW_CLIENTS", &c.slow)
	if v := os.Getenv("MEDGYM_SOAK_STORE"); v != "" {
		c.store = v
	}
	if c.store != "dir" && c.store != "minio" {
		t.Fatalf("MEDGYM_SOAK_STORE=%q: want dir or minio", c.store)
	}
	if c.runs < 1 || c.episodes < 2*c.runs {
		t.Fatalf("MEDGYM_SOAK_RUNS=%d, MEDGYM_SOAK_EPISODES=%d: want at least one run of two episodes", c.runs, c.episodes)
	}
	c.schedule = os.Getenv("MEDGYM_SOAK_SCHEDULE")
	// Every run must end by itself within this bound: a generous pace
	// for the episodes plus every fault's own length.
	c.timeout = 3*time.Minute + time.Duration(c.episodes)*600*time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("MEDGYM_SOAK_TIMEOUT")); err == nil {
		c.timeout = d
	}
	return c
}

// Fault kinds of a soak schedule.
const (
	faultKill        = "kill"         // SIGKILL a service, start it again
	faultPause       = "pause"        // SIGSTOP a service for a while (shorter than the ack wait)
	faultLongPause   = "long-pause"   // SIGSTOP past the ack wait: its messages go to another process
	faultNATSKill    = "nats-kill"    // SIGKILL nats-server, start it again after a while
	faultNATSRestart = "nats-restart" // stop nats-server gracefully, start it again
	faultMinIO       = "minio-stop"   // stop MinIO for a while, start it again
)

// soakFault is one disruption, done once the runs together have at
// scored episodes.
type soakFault struct {
	At     int
	Kind   string
	Target string        // the service, for kill and pauses
	For    time.Duration // how long it lasts (pauses, outages)
}

func (f soakFault) String() string {
	s := f.Kind
	if f.Target != "" {
		s += ":" + f.Target
	}
	s += "@" + strconv.Itoa(f.At)
	if f.For > 0 {
		s += "+" + f.For.String()
	}
	return s
}

// formatSchedule is the string MEDGYM_SOAK_SCHEDULE replays.
func formatSchedule(fs []soakFault) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.String()
	}
	return strings.Join(parts, ",")
}

// parseSchedule reads formatSchedule's output back.
func parseSchedule(s string) ([]soakFault, error) {
	var out []soakFault
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		var f soakFault
		head, at, ok := strings.Cut(part, "@")
		if !ok {
			return nil, fmt.Errorf("fault %q: no @", part)
		}
		at, d, hasFor := strings.Cut(at, "+")
		if hasFor {
			dur, err := time.ParseDuration(d)
			if err != nil {
				return nil, fmt.Errorf("fault %q: %w", part, err)
			}
			f.For = dur
		}
		n, err := strconv.Atoi(at)
		if err != nil {
			return nil, fmt.Errorf("fault %q: %w", part, err)
		}
		f.At = n
		f.Kind, f.Target, _ = strings.Cut(head, ":")
		switch f.Kind {
		case faultKill, faultPause, faultLongPause:
			if f.Target == "" {
				return nil, fmt.Errorf("fault %q: no service", part)
			}
		case faultNATSKill, faultNATSRestart, faultMinIO:
		default:
			return nil, fmt.Errorf("fault %q: unknown kind %q", part, f.Kind)
		}
		out = append(out, f)
	}
	return out, nil
}

// planSoak draws n faults from seed, at milestones between 5 % and 85 %
// of the episodes, in milestone order. The first faults drawn take each
// kind once (in a random order), so that a short schedule meets them all.
func planSoak(seed uint64, n, episodes int, services []string, minio bool, ackWait time.Duration) []soakFault {
	rng := rand.New(rand.NewPCG(seed, 0x50a6))
	each := []string{faultKill, faultPause, faultLongPause, faultNATSKill, faultNATSRestart}
	kinds := []string{faultKill, faultKill, faultKill, faultPause, faultPause, faultLongPause, faultLongPause, faultNATSKill, faultNATSRestart}
	if minio {
		each = append(each, faultMinIO)
		kinds = append(kinds, faultMinIO)
	}
	rng.Shuffle(len(each), func(i, j int) { each[i], each[j] = each[j], each[i] })
	ms := func(lo, hi time.Duration) time.Duration {
		return (lo + time.Duration(rng.Int64N(int64(hi-lo)))).Round(100 * time.Millisecond)
	}
	out := make([]soakFault, n)
	for i := range out {
		f := soakFault{At: episodes/20 + rng.IntN(episodes*8/10+1), Kind: kinds[rng.IntN(len(kinds))]}
		if i < len(each) {
			f.Kind = each[i]
		}
		switch f.Kind {
		case faultKill:
			f.Target = services[rng.IntN(len(services))]
		case faultPause:
			f.Target, f.For = services[rng.IntN(len(services))], ms(200*time.Millisecond, ackWait/2)
		case faultLongPause:
			f.Target, f.For = services[rng.IntN(len(services))], ms(ackWait+time.Second, 2*ackWait+time.Second)
		case faultNATSKill, faultMinIO:
			f.For = ms(time.Second, 6*time.Second)
		}
		out[i] = f
	}
	slices.SortStableFunc(out, func(a, b soakFault) int { return a.At - b.At })
	return out
}

// Attacks the fake model replays for a share of the tasks: each is a
// script of replies, marked so that its episodes can be found in the
// store. None may earn a reward.
const attackMarker = "soak-attack"

// attackAnswer ends an attack with an answer no task has.
const attackAnswer = `{"action": "answer", "params": {"answer": "-987654.321"}}`

// groundTruthFound starts the ground-truth attack's output when it found
// a file holding the answers.
const groundTruthFound = "GROUND-TRUTH-FOUND:"

var soakAttacks = map[string][]string{
	// Look for the ground truth (MedCalc-Bench's answer column) in every
	// file the sandbox can read; the needle is built at run time so that
	// the program's own file does not match.
	"ground-truth": {codeReply("# " + attackMarker + "\nimport subprocess\n" +
		"needle = 'Ground Truth ' + 'Answer'\n" +
		"try:\n" +
		"    r = subprocess.run(['grep', '-rIl', '-m1', '--exclude-dir=proc', '--exclude-dir=sys', '--exclude-dir=dev', needle, '/'], capture_output=True, text=True, timeout=20)\n" +
		"    hits = [l for l in r.stdout.splitlines() if l]\n" +
		"except subprocess.TimeoutExpired:\n" +
		"    hits = []\n" +
		"print('" + groundTruthFound + " ' + ' '.join(hits) if hits else 'no ground truth here')"),
		attackAnswer},
	// 64 MiB on stdout.
	"huge-output": {codeReply("# " + attackMarker + "\nimport sys\nsys.stdout.write('A' * (64 << 20))"), attackAnswer},
	// A 2 MiB reply from the model.
	"huge-reply": {`{"action": "answer", "params": {"answer": "` + attackMarker + strings.Repeat("x", 2<<20) + `"}}`},
	// An inode flood: empty files take no blocks, only the file count
	// limit stops them.
	"inode-flood": {codeReply("# " + attackMarker + "\nimport os\nos.makedirs('flood', exist_ok=True)\nfor i in range(" + strconv.Itoa(4*soakInodes) + "):\n    open('flood/%d' % i, 'w').close()"),
		attackAnswer},
	// A fork flood, then an answer.
	"fork-flood": {codeReply("# " + attackMarker + "\nimport os, time\nfor _ in range(10):\n    try:\n        os.fork()\n    except OSError:\n        break\ntime.sleep(2)"),
		attackAnswer},
}

// soakInodes is the sandbox-workers' file count limit in the soak.
const soakInodes = 5000

// soakModel is mostlyAnswering for most tasks and an attack for pct % of
// them (chosen by a hash of the conversation's first user message; the
// kinds are dealt in turn).
func soakModel(latency time.Duration, pct int) http.Handler {
	benign := mostlyAnswering(latency)
	names := slices.Sorted(maps.Keys(soakAttacks))
	attacks := make([]http.Handler, len(names))
	for i, n := range names {
		attacks[i] = fakellm.New(fakellm.Config{Policy: fakellm.PolicyScript, Script: soakAttacks[n], Seed: 1, Model: "fake",
			LatencyMean: latency, LatencyJitter: latency / 2})
	}
	// A task's attack is the next kind in turn when its first request
	// arrives, so every kind is played once there are as many attacked
	// tasks as kinds (a hash of the prompt left one kind out of a whole
	// slice).
	var mu sync.Mutex
	kindOf := map[uint32]int{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sum := firstUserHash(r); int(sum%100) < pct {
			mu.Lock()
			k, ok := kindOf[sum]
			if !ok {
				k = len(kindOf) % len(attacks)
				kindOf[sum] = k
			}
			mu.Unlock()
			attacks[k].ServeHTTP(w, r)
			return
		}
		benign.ServeHTTP(w, r)
	})
}

// rssWatch samples the peak resident set (VmHWM) of every process of the
// cluster from /proc, keeping each name's largest.
type rssWatch struct {
	mu   sync.Mutex
	peak map[string]int64 // kB
}

func (w *rssWatch) run(ctx context.Context, procs map[string]*proc) {
	for {
		for name, p := range procs {
			pid := p.pid()
			if pid == 0 {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
					kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
					w.mu.Lock()
					w.peak[name] = max(w.peak[name], kb)
					w.mu.Unlock()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// soakRun is one of the concurrent runs.
type soakRun struct {
	spec  schemas.RunSpec
	flags *cli.RunFlags
	res   cli.RunResult
	err   error
	took  time.Duration
}

// recovery is how long the pipeline took, after a fault ended, to score
// its next episode.
type recovery struct {
	kind string
	took time.Duration
	none bool // every episode was scored before it could recover
}

// TestSoak runs several concurrent runs over a cluster of processes
// (nats-server, the dispatcher, two llm-workers, two sandbox-workers, two
// verifiers, a fake model with latency that replays attacks for a share
// of tasks) while a seeded random schedule of faults is applied: kills
// and restarts of any service, SIGSTOP pauses shorter and longer than the
// ack wait, nats-server killed or restarted, MinIO stopped. Every run must
// end by itself within a bound, and every planned episode be stored
// exactly once (counted by DuckDB and by reading every file), nothing
// else stored, every infra_failure a dead-lettered episode, and no attack
// rewarded. The environment sizes it (docs/soak.md); the default is the
// CI slice.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: external processes and a fault schedule")
	}
	cfg := soakConfigFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout+2*time.Minute)
	defer cancel()

	opts := clusterOptions{natsFirst: true, verifiers: 2, ackWait: cfg.ackWait, verifierArgs: []string{"--store-give-up", "10m"},
		// A file count limit the inode-flood attack passes quickly.
		sandboxArgs: []string{"--disk-inodes", strconv.Itoa(soakInodes)}}
	var minioStop, minioRestart func()
	var endpoint string
	if cfg.store == "minio" {
		var access, secret string
		endpoint, access, secret, minioStop, minioRestart = miniotest.Start(t)
		t.Setenv("AWS_ACCESS_KEY_ID", access)
		t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
		opts.store = "s3://medgym-soak/runs"
		opts.verifierArgs = append(opts.verifierArgs, "--s3-endpoint", endpoint, "--s3-insecure=true")
	}
	c := newProcClusterWith(t, opts)
	c.failOnExit(cancel)
	services := slices.Sorted(maps.Keys(c.procs))

	schedule := planSoak(cfg.seed, cfg.faults, cfg.episodes, services, cfg.store == "minio", cfg.ackWait)
	if cfg.schedule != "" {
		var err error
		if schedule, err = parseSchedule(cfg.schedule); err != nil {
			t.Fatalf("MEDGYM_SOAK_SCHEDULE: %v", err)
		}
	}
	printed := fmt.Sprintf("seed %d, %d episodes in %d runs, store %s, ack wait %s\nMEDGYM_SOAK_SCHEDULE='%s'",
		cfg.seed, cfg.episodes, cfg.runs, cfg.store, cfg.ackWait, formatSchedule(schedule))
	t.Logf("soak schedule: %s", printed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soak failed; replay with MEDGYM_SOAK_STORE=%s MEDGYM_SOAK_EPISODES=%d MEDGYM_SOAK_RUNS=%d and\n%s",
				cfg.store, cfg.episodes, cfg.runs, printed)
		}
	})
	for _, f := range schedule {
		if f.Target != "" && c.procs[f.Target] == nil {
			t.Fatalf("fault %s: no service %q (have %v)", f, f.Target, services)
		}
		if f.Kind == faultMinIO && minioStop == nil {
			t.Fatalf("fault %s: the store is not MinIO", f)
		}
	}

	llm := httptest.NewServer(soakModel(cfg.latency, cfg.attacks))
	defer llm.Close()

	// The environment server, pressed by slow clients while sessions
	// run on it, as long as the runs last.
	var env *soakEnv
	if _, err := exec.LookPath("bwrap"); cfg.slow > 0 && err != nil {
		t.Logf("no environment server under slow clients: its sandbox needs bwrap (%v)", err)
	} else if cfg.slow > 0 {
		env = startSoakEnv(t, ctx, cfg.slow)
	}

	// The runs: the episodes split evenly, two samples per task.
	runs := make([]*soakRun, cfg.runs)
	for i := range runs {
		n := cfg.episodes / cfg.runs
		if i < cfg.episodes%cfg.runs {
			n++
		}
		f := baseFlags(t)
		f.NATS, f.Store, f.Library = c.url, c.store, c.library
		if cfg.store == "minio" {
			f.Verifier.StoreOptions.Endpoint, f.Verifier.StoreOptions.UseSSL = endpoint, false
		}
		f.Policy, f.LLMURL, f.Model = "openai", llm.URL+"/v1", "fake"
		f.Samples = 2
		if n%2 == 1 {
			f.Samples = 1
		}
		f.Limit, f.RunID, f.MaxInFlight, f.Seed = n/f.Samples, fmt.Sprintf("soak%d", i+1), 12, int64(cfg.seed)+int64(i)
		spec, err := f.Spec()
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = &soakRun{spec: spec, flags: f}
	}

	conn, kv := runsBucket(t, ctx, c.url)
	// Progress is the runs' scored episodes together, as the dispatcher
	// counts them; the last value read stands while NATS is down.
	var progressMu sync.Mutex
	last := map[string]int{}
	progress := func() int {
		progressMu.Lock()
		defer progressMu.Unlock()
		sum := 0
		for _, r := range runs {
			if st, _, err := kv.Get(ctx, r.spec.RunID); err == nil {
				last[r.spec.RunID] = st.Done
			}
			sum += last[r.spec.RunID]
		}
		return sum
	}

	rss := &rssWatch{peak: map[string]int64{}}
	watched := maps.Clone(c.procs)
	watched["nats-server"] = c.nats
	rssCtx, rssStop := context.WithCancel(ctx)
	defer rssStop()
	go rss.run(rssCtx, watched)

	// The faults, in order, as the runs progress; after each, how long
	// until the next episode is scored.
	var recoveries []recovery
	steps := make([]chaosStep, len(schedule))
	for i, f := range schedule {
		steps[i] = chaosStep{f.At, f.String(), func() {
			t.Logf("fault %s at %d scored", f, progress())
			c.apply(f, minioStop, minioRestart)
			ended, p0 := time.Now(), progress()
			rec := recovery{kind: f.Kind, none: true}
			for ctx.Err() == nil && p0 < cfg.episodes {
				if progress() > p0 {
					rec.took, rec.none = time.Since(ended), false
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			recoveries = append(recoveries, rec)
		}}
	}
	// Forgeries from a bus client among the faults: junk on every subject,
	// and "correct" scores for samples no run planned and for a run nobody
	// submitted. They must neither finish a run early nor be stored.
	allSubjects := slices.Collect(maps.Values(schemas.StreamSubjects))
	steps = append([]chaosStep{{1, "junk and forged scores", func() {
		for _, r := range runs {
			publishJunk(t, ctx, conn, r.spec.RunID, allSubjects)
			forgeUnplanned(t, ctx, conn, r.spec, c.data)
		}
		publishJunk(t, ctx, conn, "ghost", allSubjects)
	}}}, steps...)
	faultDone := runChaos(ctx, progress, steps)

	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			start := time.Now()
			runCtx, runCancel := context.WithTimeout(ctx, cfg.timeout)
			defer runCancel()
			r.res, r.err = cli.RunSpec(runCtx, r.spec, r.flags, io.Discard)
			r.took = time.Since(start)
		})
	}
	wg.Wait()
	envLine := "env sessions: none (MEDGYM_SOAK_SLOW_CLIENTS=0)"
	if env != nil {
		envLine = env.finish(ctx)
	}
	did := <-faultDone
	rssStop()
	if len(did) != len(steps) {
		t.Errorf("only %d of %d faults were applied: %v", len(did), len(steps), did)
	}

	// Read the store: a local copy of every run (MinIO) or the directory.
	dir := c.store
	if cfg.store == "minio" {
		dir = t.TempDir()
		st, err := store.Open(ctx, c.store, store.Options{Endpoint: endpoint})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.Runs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids { // every run the bucket holds, so a foreign one shows
			if err := st.CopyLocal(ctx, id, dir); err != nil {
				t.Fatalf("copy run %s: %v", id, err)
			}
		}
	}
	reports := make([]soakReport, len(runs))
	dupSQL := duckdbCounts(t, ctx, dir)
	for i, r := range runs {
		reports[i] = checkSoakRun(t, ctx, dir, r, dupSQL[r.spec.RunID])
	}
	others, _ := filepath.Glob(filepath.Join(dir, "trajectories", "run=*"))
	for _, o := range others {
		if !slices.ContainsFunc(runs, func(r *soakRun) bool { return filepath.Base(o) == "run="+r.spec.RunID }) {
			t.Errorf("the store holds a run nobody submitted: %s", filepath.Base(o))
		}
	}
	dead := streamMsgsOf(t, ctx, conn, schemas.StreamDeadLetter)
	// Every attack kind was played once there were as many attacked tasks.
	played, attacked := map[string]bool{}, 0
	for _, r := range reports {
		for k, n := range r.attackKinds {
			played[k], attacked = true, attacked+n
		}
	}
	if attacked >= 2*len(soakAttacks) && len(played) < len(soakAttacks) {
		t.Errorf("attacks played %v of %d kinds over %d attack episodes", slices.Sorted(maps.Keys(played)), len(soakAttacks), attacked)
	}
	printSoak(t, reports, dead, recoveries, rss.peak)
	t.Log(envLine)

	c.stopServices()
	waitNoProcessesIn(t, c.work)
}

// apply does one fault and returns once it is over: the process runs
// again, or the server answers again.
func (c *procCluster) apply(f soakFault, minioStop, minioRestart func()) {
	switch f.Kind {
	case faultKill:
		c.restart(f.Target)
	case faultPause, faultLongPause:
		p := c.procs[f.Target]
		p.send(syscall.SIGSTOP)
		time.Sleep(f.For)
		p.send(syscall.SIGCONT)
	case faultNATSKill:
		c.nats.kill()
		time.Sleep(f.For)
		c.nats.start()
		waitListening(c.t, c.addr)
	case faultNATSRestart:
		c.nats.stop()
		c.nats.start()
		waitListening(c.t, c.addr)
	case faultMinIO:
		minioStop()
		time.Sleep(f.For)
		minioRestart()
	}
}

// soakReport is one run's line of the final table.
type soakReport struct {
	run                               string
	planned, stored, rows, duplicates int
	duckRows, duckDuplicates          int
	missing, foreign                  int
	infra, infraJustified             int
	attacks, attacksWon               int
	searches                          int // ground-truth searches that ran to the end
	attackKinds                       map[string]int
	outcomes                          map[string]int
	hung                              bool
	took                              time.Duration
}

// duckdbCounts counts, with DuckDB over every file of the store copy in
// dir, each run's rows and its episodes stored more than once.
func duckdbCounts(t *testing.T, ctx context.Context, dir string) map[string][2]int {
	t.Helper()
	_, rows, err := query.Query(ctx, dir,
		`SELECT run_id, count(*) AS n_rows, count(*) - count(DISTINCT episode_id) AS dups FROM trajectories GROUP BY run_id`)
	if err != nil {
		t.Fatalf("duckdb: %v", err)
	}
	out := map[string][2]int{}
	for _, r := range rows {
		out[fmt.Sprint(r[0])] = [2]int{asInt(r[1]), asInt(r[2])}
	}
	return out
}

func asInt(v any) int {
	switch n := v.(type) {
	case int64:
		return int(n)
	case int32:
		return int(n)
	case uint64:
		return int(n)
	}
	i, _ := strconv.Atoi(fmt.Sprint(v))
	return i
}

// checkSoakRun reads a run's rows from every file (no dedupe), compares
// them with its plan and fails the test on any duplicate, missing or
// foreign row, unjustified infra_failure or rewarded attack.
func checkSoakRun(t *testing.T, ctx context.Context, dir string, r *soakRun, duck [2]int) soakReport {
	t.Helper()
	rep := soakReport{run: r.spec.RunID, planned: r.spec.Limit * r.spec.Samples, outcomes: map[string]int{},
		duckRows: duck[0], duckDuplicates: duck[1], took: r.took}
	if r.err != nil {
		rep.hung = true
		t.Errorf("run %s did not end by itself: %v", r.spec.RunID, r.err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "trajectories", "run="+r.spec.RunID, "*", "*.parquet"))
	seen := map[string]bool{}
	for _, path := range files {
		for _, row := range readParquetFile(t, path) {
			rep.rows++
			claim := schemas.EpisodeClaim{RunID: row.RunID, EpisodeID: row.EpisodeID, TaskID: row.TaskID, Dataset: row.Dataset, Sample: int(row.SampleIndex)}
			if err := r.spec.Admits(claim); err != nil || row.RunID != r.spec.RunID {
				rep.foreign++
				t.Errorf("run %s: foreign row %s: %v", r.spec.RunID, row.EpisodeID, err)
				continue
			}
			if seen[row.EpisodeID] {
				rep.duplicates++
				t.Errorf("run %s: episode %s stored more than once (%s)", r.spec.RunID, row.EpisodeID, path)
				continue
			}
			seen[row.EpisodeID] = true
			rep.outcomes[row.Outcome]++
			if row.Outcome == string(schemas.OutcomeInfraFailure) {
				rep.infra++
				// Justified: its deliveries ran out (a dead letter the
				// dispatcher recorded as the episode's outcome).
				if strings.Contains(row.Error, "dead letter from") {
					rep.infraJustified++
				} else {
					t.Errorf("run %s: episode %s: unjustified infra_failure: %s", r.spec.RunID, row.EpisodeID, row.Error)
				}
			}
			if isAttack(row) {
				rep.attacks++
				if rep.attackKinds == nil {
					rep.attackKinds = map[string]int{}
				}
				rep.attackKinds[attackKind(row)]++
				for _, turn := range row.Turns {
					if strings.Contains(turn.Observation, "no ground truth here") || strings.Contains(turn.Stdout, "no ground truth here") {
						rep.searches++
					}
					if strings.Contains(turn.Observation, groundTruthFound) {
						rep.attacksWon++ // a success, reward or not
						t.Errorf("run %s: episode %s read the ground truth: %.300s", r.spec.RunID, row.EpisodeID, turn.Observation)
					}
				}
				if row.Reward > 0 {
					rep.attacksWon++
					t.Errorf("run %s: attack episode %s earned %v", r.spec.RunID, row.EpisodeID, row.Reward)
				}
			}
		}
	}
	rep.stored = len(seen)
	rep.missing = rep.planned - rep.stored
	if rep.missing != 0 {
		t.Errorf("run %s: %d of %d planned episodes missing", r.spec.RunID, rep.missing, rep.planned)
	}
	if rep.duckDuplicates != 0 || rep.duckRows != rep.rows {
		t.Errorf("run %s: DuckDB counts %d rows with %d duplicates, the files hold %d", r.spec.RunID, rep.duckRows, rep.duckDuplicates, rep.rows)
	}
	return rep
}

// attackKind names the attack an attack episode replayed: its first reply
// is the script's first (the huge reply is stored capped, head and tail).
func attackKind(row parquet.Row) string {
	if len(row.Turns) == 0 {
		return "?"
	}
	raw := row.Turns[0].RawText
	for _, name := range slices.Sorted(maps.Keys(soakAttacks)) {
		first := soakAttacks[name][0]
		if raw == first || len(first) > 64<<10 && strings.HasPrefix(raw, first[:1<<10]) {
			return name
		}
	}
	return "?"
}

func isAttack(row parquet.Row) bool {
	for _, turn := range row.Turns {
		if strings.Contains(turn.RawText, attackMarker) {
			return true
		}
	}
	return false
}

// printSoak logs the final tables.
func printSoak(t *testing.T, reps []soakReport, dead uint64, recs []recovery, rss map[string]int64) {
	t.Helper()
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "run\tplanned\tstored\tduplicates\tduckdb dups\tmissing\tforeign\tinfra_failure (justified)\tattacks (succeeded)\tgt searches\thung\ttook\toutcomes")
	for _, r := range reps {
		outs := make([]string, 0, len(r.outcomes))
		for _, k := range slices.Sorted(maps.Keys(r.outcomes)) {
			outs = append(outs, fmt.Sprintf("%s=%d", k, r.outcomes[k]))
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d (%d)\t%d (%d)\t%d\t%v\t%s\t%s\n", r.run, r.planned, r.stored, r.duplicates, r.duckDuplicates,
			r.missing, r.foreign, r.infra, r.infraJustified, r.attacks, r.attacksWon, r.searches, r.hung, r.took.Round(time.Second), strings.Join(outs, " "))
	}
	for _, r := range reps {
		kinds := make([]string, 0, len(r.attackKinds))
		for _, k := range slices.Sorted(maps.Keys(r.attackKinds)) {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, r.attackKinds[k]))
		}
		fmt.Fprintf(w, "attacks of %s: %s\n", r.run, strings.Join(kinds, " "))
	}
	fmt.Fprintf(w, "dead letters (all runs): %d\n", dead)
	w.Flush()
	fmt.Fprintln(&b)
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "fault kind\tcount\trecovered\tmean recovery\tmax recovery")
	byKind := map[string][]recovery{}
	for _, r := range recs {
		byKind[r.kind] = append(byKind[r.kind], r)
	}
	for _, k := range []string{faultKill, faultPause, faultLongPause, faultNATSKill, faultNATSRestart, faultMinIO} {
		rs := byKind[k]
		if len(rs) == 0 {
			continue
		}
		var sum, most time.Duration
		n := 0
		for _, r := range rs {
			if !r.none {
				n++
				sum += r.took
				most = max(most, r.took)
			}
		}
		mean := time.Duration(0)
		if n > 0 {
			mean = sum / time.Duration(n)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", k, len(rs), n, mean.Round(10*time.Millisecond), most.Round(10*time.Millisecond))
	}
	w.Flush()
	fmt.Fprintln(&b)
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "process\tpeak RSS")
	for _, name := range slices.Sorted(maps.Keys(rss)) {
		fmt.Fprintf(w, "%s\t%.1f MiB\n", name, float64(rss[name])/1024)
	}
	w.Flush()
	t.Logf("soak result:\n%s", b.String())
}

// TestSoakSchedule: a drawn schedule prints as a string that parses back
// to the same faults, the same seed draws the same schedule, and every
// kind is drawn in a schedule as long as the kinds.
func TestSoakSchedule(t *testing.T) {
	services := []string{"dispatcher", "llm-worker1", "verifier1"}
	plan := planSoak(7, 12, 500, services, true, 3*time.Second)
	if again := planSoak(7, 12, 500, services, true, 3*time.Second); !slices.Equal(plan, again) {
		t.Fatalf("seed 7 drew %v, then %v", plan, again)
	}
	back, err := parseSchedule(formatSchedule(plan))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan, back) {
		t.Fatalf("%s parsed back as %v", formatSchedule(plan), back)
	}
	kinds := map[string]bool{}
	for _, f := range planSoak(3, 6, 200, services, true, 3*time.Second) {
		kinds[f.Kind] = true
	}
	if len(kinds) != 6 {
		t.Errorf("six faults drew the kinds %v, want all six", kinds)
	}
	for _, bad := range []string{"kill@3", "boom@3", "pause:verifier1", "nats-kill@x", "pause:verifier1@3+soon"} {
		if _, err := parseSchedule(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// forgeUnplanned publishes, on run spec's own score subject, a "correct"
// score for samples K..2K-1 of tasks of its dataset (from data) (no run plans them,
// whatever tasks it selected) and one for a run nobody submitted.
func forgeUnplanned(t *testing.T, ctx context.Context, conn *bus.Conn, spec schemas.RunSpec, data string) {
	t.Helper()
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: spec.Datasets[0], Split: spec.Split, DataRoot: data})
	if err != nil {
		t.Errorf("forge scores: %v", err)
		return
	}
	for i, task := range ts[:min(len(ts), spec.Limit)] {
		for k := spec.Samples; k < 2*spec.Samples; k++ {
			run := spec.RunID
			if i == 0 && k == spec.Samples {
				run = "ghost"
			}
			sc := schemas.Score{RunID: run, EpisodeID: schemas.EpisodeID(run, task.View.ID, k), TaskID: task.View.ID,
				Dataset: spec.Datasets[0], SampleIndex: k, Outcome: schemas.OutcomeCorrect, Reward: 1, VerifierVersion: "forged",
				ScoredAt: time.Now().UTC()}
			if err := conn.Publish(ctx, schemas.EpisodeScored.For(spec.RunID), "", sc); err != nil {
				t.Errorf("forge score: %v", err)
				return
			}
		}
	}
}
