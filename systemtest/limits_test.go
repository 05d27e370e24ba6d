package systemtest

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// TestLargeOutputsKeepEveryTurn (issue 13 item 5): an agent whose code
// prints at and above the output caps, on a server whose max_payload
// (256 KiB) is smaller than one uncapped observation, an episode state or
// its result. Every turn is kept and scored as the agent's own (turn
// limit), never infra_failure; each stored output is capped with a marker
// and its full size recorded. Before: "maximum payload exceeded", then
// infra_failure with num_turns = 0.
func TestLargeOutputsKeepEveryTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts := medcalcTasks(t, ctx, f.Data)
	url, _ := startCluster(t, ctx, f.ServiceFlags, 256<<10)

	// Sizes of stdout per turn, newline included: at the stored cap, at the
	// sandbox's 256 KiB cap, then above both.
	sizes := []int{schemas.MaxStoredOutputBytes, 256 << 10, 300_000, 300_000, 300_000, 300_000}
	var script []string
	for i, n := range sizes {
		tail := fmt.Sprintf("%07d\n", 9_000_000+i) // the last line: a wrong answer, different each turn
		code := fmt.Sprintf("import sys\nsys.stdout.write('y' * %d + %q)", n-len(tail), tail)
		script = append(script, actionJSON("validate_code", "code", code))
	}
	llm := httptest.NewServer(fakellm.New(fakellm.Config{Script: script, Seed: 1}))
	defer llm.Close()
	f.NATS, f.Policy, f.LLMURL, f.Model, f.RunID = url, "openai", llm.URL+"/v1", fakellm.DefaultModel, "big-output"
	f.TaskIDs, f.MaxTurns = ts[0].View.ID, len(sizes)
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.Store, "big-output")
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1 (outcomes %v)", len(rows), res.Outcomes)
	}
	r := rows[0]
	if r.Outcome != string(schemas.OutcomeTurnLimit) || int(r.NumTurns) != len(sizes) {
		t.Fatalf("outcome %s with %d turns (error %q), want turn_limit with %d", r.Outcome, r.NumTurns, r.Error, len(sizes))
	}
	for i, tr := range r.Turns {
		n := sizes[i]
		if tr.StdoutBytes != int64(n) {
			t.Errorf("turn %d: stdout_bytes %d, want the full %d", i, tr.StdoutBytes, n)
		}
		if len(tr.Stdout) > schemas.MaxStoredOutputBytes+200 || len(tr.Observation) > schemas.MaxStoredOutputBytes+200 {
			t.Errorf("turn %d: stored stdout %d / observation %d bytes, over the cap", i, len(tr.Stdout), len(tr.Observation))
		}
		// The stored tail is the output's end, or past the sandbox's cap
		// (it keeps the first 256 KiB) the sandbox's own marker.
		want := fmt.Sprintf("%07d\n", 9_000_000+i)
		if n > 256<<10 {
			want = fmt.Sprintf("[output truncated: %d more bytes not shown]", n-256<<10)
		}
		if !strings.HasSuffix(tr.Stdout, want) {
			t.Errorf("turn %d: stored stdout ends %q, want %q", i, tr.Stdout[max(0, len(tr.Stdout)-60):], want)
		}
		capped := strings.Contains(tr.Stdout, fmt.Sprintf("the full output was %d bytes", n))
		if capped != (n > schemas.MaxStoredOutputBytes) || tr.Truncated != capped {
			t.Errorf("turn %d (%d bytes): marker %v, truncated %v; want both %v", i, n, capped, tr.Truncated, n > schemas.MaxStoredOutputBytes)
		}
	}
	if m := r.Messages[3].Content; m != r.Turns[0].Observation {
		t.Errorf("the model was not shown the stored observation")
	}
}

// TestRunRejectsBadFlags (issue 13 item 9): each of these used to be
// accepted and misread (--limit -1 meant all tasks, --action-timeout
// 9300000000 overflowed to a negative limit, --llm-retries -1 meant the
// default). They fail before anything starts, naming the flag's value.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--limit", "-1"},
		{"--temperatures", "0,2.5"},
		{"--temperatures", "-0.1"},
		{"--temperatures", "0.6abc"},
		{"--action-timeout", "9300000000"},
		{"--action-timeout", "0"},
		{"--episode-timeout", "-1"},
		{"--llm-retries", "-1"},
		{"--max-in-flight", "-3"},
		{"--llm-concurrency", "0"},
		{"--loop-guard", "maybe"},
		{"--replicas", "3"}, // the embedded server is one node
		{"--replicas", "9"},
		{"--replicas", "0", "--nats", "nats://127.0.0.1:1"},
		{"--policy", "openai", "--model", "m", "--llm-url", "http://u:pw-s3cr3t@127.0.0.1:1/v1", "--temperatures", "7"},
	} {
		var stderr strings.Builder
		err := cli.Run(t.Context(), append([]string{"run", "--state", t.TempDir(), "--store", t.TempDir()}, args...), io.Discard, &stderr)
		if err == nil {
			t.Errorf("%v: accepted", args)
			continue
		}
		if strings.Contains(err.Error(), "pw-s3cr3t") || strings.Contains(stderr.String(), "pw-s3cr3t") {
			t.Errorf("%v: the password is shown: %v", args, err)
		}
		if strings.Contains(err.Error(), "submitted") || strings.Contains(stderr.String(), "submitted") {
			t.Errorf("%v: a run was submitted", args)
		}
	}
}

// TestSummarySaysOfScored: 7 of 20 episodes infra_failure used to print
// "success rate 100.0%".
func TestSummarySaysOfScored(t *testing.T) {
	var b strings.Builder
	cli.PrintSummary(&b, cli.RunResult{RunID: "r", Total: 20, Outcomes: map[schemas.Outcome]int{
		schemas.OutcomeCorrect: 13, schemas.OutcomeInfraFailure: 7}, Store: "runs"})
	if want := "success 100.0% of 13 scored, 7 infra_failure not scored (13 correct, 7 infra_failure)"; !strings.Contains(b.String(), want) {
		t.Errorf("summary %q, want it to contain %q", b.String(), want)
	}
	b.Reset()
	cli.PrintSummary(&b, cli.RunResult{RunID: "r", Total: 4, Outcomes: map[schemas.Outcome]int{schemas.OutcomeCorrect: 1, schemas.OutcomeIncorrect: 3}})
	if want := "success 25.0% of 4 scored (1 correct, 3 incorrect)"; !strings.Contains(b.String(), want) {
		t.Errorf("summary %q, want it to contain %q", b.String(), want)
	}
}

// TestLLMCredentialsNeverPersisted (issue 13 item 8): --llm-url with
// user:password used to be kept in the JetStream streams and the key-value
// buckets. The endpoint (which demands the credentials, over https with a
// private CA given by --llm-ca) is reached, and no byte of the JetStream
// store or the trajectory store holds the password.
func TestLLMCredentialsNeverPersisted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts := medcalcTasks(t, ctx, f.Data)
	fake := fakellm.New(fakellm.Config{Script: []string{actionJSON("validate_code", "code", ts[0].Reference)}, Seed: 1})
	var authed atomic.Int32
	// Over https, with a certificate only --llm-ca makes trusted (item 10).
	llm := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "pw-s3cr3t" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		authed.Add(1)
		fake.ServeHTTP(w, r)
	}))
	defer llm.Close()
	f.Policy, f.Model, f.RunID = "openai", fakellm.DefaultModel, "creds"
	f.LLMURL = strings.Replace(llm.URL, "https://", "https://alice:pw-s3cr3t@", 1) + "/v1"
	f.LLM.LLM.CAFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f.LLM.LLM.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: llm.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	f.TaskIDs = ts[0].View.ID
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	res, err := cli.RunSpec(ctx, spec, f, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcomes[schemas.OutcomeCorrect] != 1 || authed.Load() == 0 {
		t.Fatalf("outcomes %v, %d authenticated requests: the endpoint was not reached with its credentials", res.Outcomes, authed.Load())
	}
	if strings.Contains(stderr.String(), "pw-s3cr3t") {
		t.Errorf("the password is in the output:\n%s", stderr.String())
	}
	files := 0
	for _, root := range []string{f.State, f.Store} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			if bytes.Contains(b, []byte("pw-s3cr3t")) {
				t.Errorf("%s holds the password", path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 10 {
		t.Fatalf("only %d files searched", files)
	}
}

// startCluster starts an embedded server (maxPayload 0: its default) and
// every service (as `medgym serve` does) with the given flags; it returns the URL and a function that
// waits for the services to stop on their own and returns their error.
func startCluster(t *testing.T, ctx context.Context, sf cli.ServiceFlags, maxPayload int32) (url string, wait func() error) {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	logger := cli.NewLogger(io.Discard, "error")
	conn, err := bus.Connect(ctx, ns.ClientURL(), "test", logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	svcCtx, cancel := context.WithCancel(ctx)
	w := cli.StartServices(svcCtx, conn, &sf, "", logger)
	var once sync.Once
	var werr error
	wait = func() error {
		once.Do(func() { werr = w() })
		return werr
	}
	t.Cleanup(func() {
		cancel()
		_ = wait()
		conn.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns.ClientURL(), wait
}

// TestRunOverNATSFindsTheVerifierStore (issue 13 item 9): `medgym run
// --nats URL` without --store finished 120/120 and then failed with "store
// runs holds 0 of 120 episodes", having checked a local default while the
// verifier wrote elsewhere. The scores now say where the rows are.
func TestRunOverNATSFindsTheVerifierStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	svc := baseFlags(t)
	url, _ := startCluster(t, ctx, svc.ServiceFlags, 0) // its verifier writes to svc.store

	f := baseFlags(t) // a different, default-looking store
	f.NATS, f.RunID, f.Limit = url, "over-nats", 3
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 3 || res.Store != svc.Store {
		t.Errorf("run of %d episodes read from %s, want 3 from the verifier's %s", res.Total, res.Store, svc.Store)
	}
	if rows := readRun(t, ctx, svc.Store, "over-nats"); len(rows) != 3 {
		t.Errorf("verifier's store holds %d rows", len(rows))
	}
	st, err := store.Open(ctx, svc.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReadManifest(ctx, "over-nats"); err != nil {
		t.Errorf("manifest not written beside the rows: %v", err)
	}

	// An explicit --store that is not the verifier's is an error naming both.
	f.Explicit, f.RunID = map[string]bool{"store": true}, "over-nats-2"
	spec, _ = f.Spec()
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err == nil || !strings.Contains(err.Error(), svc.Store) {
		t.Errorf("--store elsewhere: %v, want an error naming %s", err, svc.Store)
	}
}

// TestUnwritableStoreFailsFast (issue 13 item 9): a store the verifier
// cannot write made the run hang at 0 with endless retries. A file where
// the trajectories directory should be makes a store no one can write, even
// root: the run fails before it is submitted, and a verifier refuses to
// start, each saying why.
func TestUnwritableStoreFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "trajectories"), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := baseFlags(t)
	f.Store, f.RunID, f.Limit = bad, "unwritable", 2
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	_, err = cli.RunSpec(ctx, spec, f, &stderr)
	if err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("embedded run: %v, want a 'not writable' error", err)
	}
	if strings.Contains(stderr.String(), "submitted") {
		t.Error("the run was submitted")
	}

	svc := baseFlags(t)
	svc.Store = bad
	_, wait := startCluster(t, ctx, svc.ServiceFlags, 0)
	if err := wait(); err == nil || !strings.Contains(err.Error(), "verifier") || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("services on an unwritable store: %v, want the verifier to refuse", err)
	}
}

// medcalcTasks loads MedCalc-Bench's test tasks from the data root.
func medcalcTasks(t *testing.T, ctx context.Context, data string) []tasks.Task {
	t.Helper()
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: data})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
