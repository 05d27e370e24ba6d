package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/fnv"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// chaosOutage is how long TestChaosIntegrity keeps nats-server down:
// MEDGYM_CHAOS_OUTAGE (a duration), else the 60 s issue 13 asks for, which
// outlasts every loop's own timeouts.
func chaosOutage() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MEDGYM_CHAOS_OUTAGE")); err == nil {
		return d
	}
	return 60 * time.Second
}

// mostlyAnswering is a fake model that answers for nine tasks in ten and
// runs one program before answering for the tenth (chosen by a hash of the
// conversation's first user message), so a long run is quick yet still
// goes through the sandbox. Each reply takes latency ± latency/2, which
// paces the run so that the chaos meets it mid-way.
func mostlyAnswering(latency time.Duration) http.Handler {
	answer := fakellm.New(fakellm.Config{Policy: fakellm.PolicyScript, Script: []string{answerReply}, Seed: 1, Model: "fake",
		LatencyMean: latency, LatencyJitter: latency / 2})
	code := fakellm.New(fakellm.Config{Policy: fakellm.PolicyScript, Script: []string{codeReply("print(1)"), answerReply}, Seed: 1, Model: "fake",
		LatencyMean: latency, LatencyJitter: latency / 2})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if firstUserHash(r)%10 == 0 {
			code.ServeHTTP(w, r)
			return
		}
		answer.ServeHTTP(w, r)
	})
}

// firstUserHash is a hash of a chat request's first user message (the
// task's prompt), leaving the request's body readable.
func firstUserHash(r *http.Request) uint32 {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Messages []struct{ Role, Content string }
	}
	_ = json.Unmarshal(body, &req)
	h := fnv.New32a()
	for _, m := range req.Messages {
		if m.Role == "user" {
			h.Write([]byte(m.Content))
			break
		}
	}
	return h.Sum32()
}

// runsBucket connects to url (closed when the test ends), makes sure the
// streams exist and opens the runs' status bucket.
func runsBucket(t *testing.T, ctx context.Context, url string) (*bus.Conn, *bus.Bucket[schemas.RunStatus]) {
	t.Helper()
	conn, err := bus.Connect(ctx, url, "chaos", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	return conn, kv
}

// forgeScores publishes, on the run's own score subject, a "correct" score
// for every unplanned sample K..2K-1 of each task (as many distinct ids as
// the run plans: a follower counting distinct ids would finish early), one
// for a task the run did not select and one carrying another run's id; and
// one on the subject of a run nobody submitted.
func forgeScores(t *testing.T, ctx context.Context, conn *bus.Conn, spec schemas.RunSpec, ts []tasks.Task) {
	t.Helper()
	score := func(run, task string, k int) schemas.Score {
		return schemas.Score{RunID: run, EpisodeID: schemas.EpisodeID(run, task, k), TaskID: task, Dataset: "medcalcbench",
			SampleIndex: k, Outcome: schemas.OutcomeCorrect, Reward: 1, VerifierVersion: "forged", ScoredAt: time.Now().UTC()}
	}
	var forged []schemas.Score
	for _, task := range ts[:spec.Limit] {
		for k := spec.Samples; k < 2*spec.Samples; k++ {
			forged = append(forged, score(spec.RunID, task.View.ID, k))
		}
	}
	forged = append(forged, score(spec.RunID, ts[len(ts)-1].View.ID, 0), score("ghost", ts[0].View.ID, 0))
	for _, sc := range forged {
		if err := conn.Publish(ctx, schemas.EpisodeScored.For(spec.RunID), "", sc); err != nil {
			t.Errorf("forge score: %v", err)
			return
		}
	}
	if err := conn.Publish(ctx, schemas.EpisodeScored.For("ghost"), "", score("ghost", ts[0].View.ID, 0)); err != nil {
		t.Errorf("forge score: %v", err)
	}
}

// TestChaosIntegrity is issue 13's combined test: a run of 200 episodes
// against an external nats-server, every service its own process, while
// junk bodies are published on every subject (twice), forged scores arrive
// (more unplanned distinct ids than the run plans), nats-server is stopped
// for 60 s and restarted on the same store, and one llm-worker, one
// sandbox-worker, the dispatcher and the verifier are SIGKILLed and
// restarted. The run ends on its own; every planned episode is stored
// exactly once (counted over every file), nothing else is stored, the
// dead-letter stream holds only what was published to it directly, every
// consumer drains, and no sandbox process is left behind.
func TestChaosIntegrity(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: external processes and a 60 s NATS outage")
	}
	const (
		run      = "chaos13"
		limit    = 100
		samples  = 2
		episodes = limit * samples
	)
	outage := chaosOutage()
	c := startProcCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), chaosTimeout()+outage)
	defer cancel()
	c.failOnExit(cancel)
	llm := httptest.NewServer(mostlyAnswering(2 * time.Second))
	defer llm.Close()
	f := baseFlags(t)
	f.NATS, f.Store, f.Library = c.url, c.store, c.library
	f.Policy, f.LLMURL, f.Model = "openai", llm.URL+"/v1", "fake"
	f.Limit, f.Samples, f.RunID, f.MaxInFlight = limit, samples, run, 12
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: spec.Split, DataRoot: c.data})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) <= limit {
		t.Fatalf("medcalcbench has %d tasks, the test needs more than %d", len(ts), limit)
	}
	conn, kv := runsBucket(t, ctx, c.url)
	// Progress is the dispatcher's count of planned, scored episodes (the
	// scores subject also holds the forged ones); the last value read
	// stands while NATS is down.
	last := 0
	progress := func() int {
		if st, _, err := kv.Get(ctx, run); err == nil {
			last = st.Done
		}
		return last
	}
	allSubjects := slices.Collect(maps.Values(schemas.StreamSubjects))
	junkRounds := 0
	flood := func() {
		junkRounds++
		publishJunk(t, ctx, conn, run, allSubjects)
		publishJunk(t, ctx, conn, "x", allSubjects)
		forgeScores(t, ctx, conn, spec, ts)
	}
	steps := []chaosStep{{1, "junk and forged scores", flood}}
	for i, name := range []string{"llm-worker1", "sandbox-worker1"} {
		steps = append(steps, chaosStep{25 * (i + 1), "kill " + name, func() { c.restart(name) }})
	}
	steps = append(steps, chaosStep{75, "NATS outage", func() {
		c.nats.stop()
		t.Logf("nats-server stopped at %d/%d episodes for %s", last, episodes, outage)
		select {
		case <-ctx.Done():
		case <-time.After(outage):
		}
		c.nats.start()
	}})
	for i, name := range []string{"dispatcher", "verifier"} {
		steps = append(steps, chaosStep{100 + 25*i, "kill " + name, func() { c.restart(name) }})
	}
	steps = append(steps, chaosStep{150, "junk and forged scores", flood})
	chaosDone := runChaos(ctx, progress, steps)

	start := time.Now()
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	did := <-chaosDone
	t.Logf("run ended after %s: %v; chaos: %v", time.Since(start).Round(time.Second), res.Outcomes, did)
	if len(did) != len(steps) {
		t.Fatalf("only %v of %d steps were done: the run finished before the chaos plan", did, len(steps))
	}
	sum := 0
	for _, n := range res.Outcomes {
		sum += n
	}
	if res.Total != episodes || sum != episodes {
		t.Fatalf("run has %d episodes with %d outcomes, want %d", res.Total, sum, episodes)
	}

	// Nothing keeps producing: every durable consumer drains.
	allDrained(t, ctx, conn)
	// Dead letters stay bounded: the stream holds the junk published to it
	// directly and nothing a handler made of junk or forgeries.
	direct := uint64(2 * junkRounds * len(junkBodies))
	if n := streamMsgsOf(t, ctx, conn, schemas.StreamDeadLetter); n != direct {
		t.Errorf("dead-letter stream holds %d messages, want the %d published to it directly", n, direct)
	}

	// Every planned episode is stored exactly once, and nothing else.
	if !eachStoredOnce(t, c.store, run, episodes) {
		t.FailNow()
	}
	for _, r := range readRun(t, ctx, c.store, run) {
		claim := schemas.EpisodeClaim{RunID: r.RunID, EpisodeID: r.EpisodeID, TaskID: r.TaskID, Dataset: r.Dataset, Sample: int(r.SampleIndex)}
		if err := spec.Admits(claim); err != nil {
			t.Errorf("stored an unplanned episode: %v", err)
		}
		if !schemas.Outcome(r.Outcome).Valid() || r.VerifierVersion == "forged" {
			t.Errorf("episode %s: outcome %q by %q", r.EpisodeID, r.Outcome, r.VerifierVersion)
		}
	}
	runs, _ := filepath.Glob(filepath.Join(c.store, "trajectories", "run=*"))
	if len(runs) != 1 || filepath.Base(runs[0]) != "run="+run {
		t.Errorf("the store holds runs %v, want only run=%s", runs, run)
	}
	c.stopServices()
	waitNoProcessesIn(t, c.work)
}
