package systemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/store"
)

// runInBackground starts every service in-process on conn and runs spec
// through cli.RunSpec (which, with f.NATS set, starts nothing itself).
type backgroundRun struct {
	res  cli.RunResult
	err  error
	done chan struct{}
}

func startRun(t *testing.T, ctx context.Context, conn *bus.Conn, f *cli.RunFlags, logs io.Writer) *backgroundRun {
	t.Helper()
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	svcCtx, stop := context.WithCancel(ctx)
	wait := cli.StartServices(svcCtx, conn, &f.ServiceFlags, "", cli.NewLogger(logs, f.LogLevel))
	t.Cleanup(func() {
		stop()
		if err := wait(); err != nil {
			t.Errorf("services: %v", err)
		}
	})
	r := &backgroundRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.res, r.err = cli.RunSpec(ctx, spec, f, logs)
	}()
	return r
}

// waitDone polls until the run has n scored episodes.
func waitDone(t *testing.T, ctx context.Context, conn *bus.Conn, run string, n int, r *backgroundRun) {
	t.Helper()
	for done(ctx, conn, run) < n {
		select {
		case <-r.done:
			t.Fatalf("run ended before %d episodes: %+v %v", n, r.res, r.err)
		case <-ctx.Done():
			t.Fatalf("run %s did not reach %d episodes", run, n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestCancelCLI: `medgym cancel RUN` in the middle of a run stops the
// publishing, lets the episodes in flight finish, ends the following
// `medgym run` with an error that says so, and marks the run cancelled in
// the store's manifest. Cancelling an unknown or finished run is an error.
func TestCancelCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := baseFlags(t)
	conn := embeddedBus(t, ctx, f)
	const planned = 40
	f.Limit, f.RunID, f.MaxInFlight = planned, "cancelme", 2
	r := startRun(t, ctx, conn, f, io.Discard)
	waitDone(t, ctx, conn, "cancelme", 3, r)

	var out, errOut bytes.Buffer
	if err := cli.Run(ctx, []string{"cancel", "--nats", f.NATS, "--store", f.Store, "cancelme"}, &out, &errOut); err != nil {
		t.Fatalf("cancel: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "cancelled (drain)") {
		t.Fatalf("cancel printed %q", out.String())
	}
	<-r.done
	if r.err == nil || !strings.Contains(r.err.Error(), "was cancelled") {
		t.Fatalf("medgym run after cancel: %+v, err %v", r.res, r.err)
	}
	st, err := store.Open(ctx, f.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.ReadManifest(ctx, "cancelme")
	if err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.Store, "cancelme")
	if !m.Cancelled || m.Planned != planned || m.Total != len(rows) || len(rows) < 3 || len(rows) >= planned {
		t.Fatalf("manifest: cancelled %v, planned %d, total %d; %d rows stored", m.Cancelled, m.Planned, m.Total, len(rows))
	}
	// Nothing is published after the drain: the rows are all there is.
	if n := done(ctx, conn, "cancelme"); n != len(rows) {
		t.Fatalf("%d scores, %d rows", n, len(rows))
	}
	t.Logf("cancelled at %d of %d episodes", len(rows), planned)

	for _, c := range []struct{ run, want string }{{"nope", "no run nope"}, {"cancelme", ""}} {
		err := cli.Run(ctx, []string{"cancel", "--nats", f.NATS, "--store", f.Store, "--wait", "0", c.run}, io.Discard, io.Discard)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Fatalf("cancel %s: %v, want %q", c.run, err, c.want)
		}
	}
	err = cli.Run(ctx, []string{"cancel", "--nats", f.NATS, "bad.id"}, io.Discard, io.Discard)
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("cancel bad.id: %v", err)
	}
}

// TestRunRefusesTooLarge: --samples 1000000 or 2e9 over the library is
// refused at submit time with the limit and the fix, before anything runs.
func TestRunRefusesTooLarge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"--samples", "1000000"},
		{"--samples", "2000000000", "--limit", "1"},
		{"--samples", "600", "--limit", "20", "--max-episodes", "10000"},
	} {
		f := baseFlags(t)
		var stderr bytes.Buffer
		err := cli.Run(ctx, append([]string{"run", "--quiet", "--data", f.Data, "--state", f.State, "--store", f.Store}, args...), io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), "more than the limit of") || !strings.Contains(err.Error(), "--max-episodes") {
			t.Fatalf("run %v: %v", args, err)
		}
	}
}

// TestCancelEmbeddedState: without --nats, `medgym cancel` opens the
// embedded server's state, where no service runs, and finishes an
// interrupted run itself, withdrawing its requests with --drop.
func TestCancelEmbeddedState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := baseFlags(t)
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(f.State, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := bus.Connect(ctx, ns.ClientURL(), "test", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	f.RunID, f.Samples = "interrupted", 5
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "interrupted", schemas.RunStatus{Spec: spec, Total: 5, Published: 2}); err != nil {
		t.Fatal(err)
	}
	req := schemas.EpisodeRequest{RunID: "interrupted", EpisodeID: "interrupted--t-k0", Task: schemas.TaskView{ID: "t", Dataset: "medcalcbench", Question: "q"},
		Policy: spec.Policy, Options: spec.Options}
	if err := conn.Publish(ctx, schemas.EpisodeRequested.For("interrupted"), "r0", req); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	ns.Shutdown()
	ns.WaitForShutdown()

	var out bytes.Buffer
	if err := cli.Run(ctx, []string{"cancel", "--drop", "--state", f.State, "--store", f.Store, "interrupted"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cancelled (drop): 0 of 5 episodes stored, 2 published") {
		t.Fatalf("cancel printed %q", out.String())
	}
	st, err := store.Open(ctx, f.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.ReadManifest(ctx, "interrupted"); err != nil || !m.Cancelled || m.Planned != 5 || m.Total != 0 {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	// The state says so, and the request is gone.
	ns, err = embedded.Start(embedded.Options{StoreDir: filepath.Join(f.State, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	conn, err = bus.Connect(ctx, ns.ClientURL(), "test", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv, err = bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	rs, _, err := kv.Get(ctx, "interrupted")
	if err != nil || !rs.Finished || !rs.Cancelled || rs.Cancel != schemas.CancelDrop {
		t.Fatalf("status %+v, %v", rs, err)
	}
	left, err := conn.SubjectCount(ctx, schemas.StreamEpisodes, schemas.EpisodeRequested.For("interrupted"))
	if err != nil || left != 0 {
		t.Fatalf("requests left: %d, %v", left, err)
	}
}

// TestCancelDropStopsInFlight (robust item 2): `medgym cancel --drop`
// withdrew only the requests no worker had taken; an episode already
// running went on to its turn limit. Now the llm-worker reads the run's
// status at each turn boundary: the episodes in flight (a slow fake model
// whose every program is wrong, so each would run its 30 turns) stop at
// their next observation and are stored once as infra_failure, saying so,
// with the turns they had. The positive control is the turn count: run to
// the end they would have 30.
func TestCancelDropStopsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const maxTurns = 30
	script := make([]string, maxTurns)
	for i := range script {
		script[i] = actionJSON("validate_code", "code", fmt.Sprintf("print(%d)", 100000+i))
	}
	fake := fakellm.New(fakellm.Config{Script: script, LatencyMean: 150 * time.Millisecond, Model: "fake"})
	llm := httptest.NewServer(fake)
	defer llm.Close()
	f := baseFlags(t)
	conn := embeddedBus(t, ctx, f)
	const inFlight = 2
	f.Policy, f.LLMURL, f.Model, f.MaxTurns = "openai", llm.URL+"/v1", "fake", maxTurns
	f.Limit, f.RunID, f.MaxInFlight = 6, "dropme", inFlight
	r := startRun(t, ctx, conn, f, io.Discard)
	// Both episodes in flight are a few turns in.
	for fake.Stats().Requests < 3*inFlight {
		select {
		case <-r.done:
			t.Fatalf("run ended early: %+v %v", r.res, r.err)
		case <-ctx.Done():
			t.Fatal("the episodes never got going")
		case <-time.After(50 * time.Millisecond):
		}
	}
	var out, errOut bytes.Buffer
	if err := cli.Run(ctx, []string{"cancel", "--drop", "--nats", f.NATS, "--store", f.Store, "dropme"}, &out, &errOut); err != nil {
		t.Fatalf("cancel --drop: %v\n%s", err, errOut.String())
	}
	<-r.done
	if r.err == nil || !strings.Contains(r.err.Error(), "was cancelled") {
		t.Fatalf("medgym run after cancel: %+v, err %v", r.res, r.err)
	}
	// The episodes in flight are stored once they reach their next turn.
	var rows []parquet.Row
	for {
		if rows = readRunMaybe(ctx, f.Store, "dropme"); len(rows) >= inFlight {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of the %d episodes in flight stored after the drop", len(rows), inFlight)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if len(rows) != inFlight {
		t.Fatalf("%d rows stored, want the %d episodes in flight", len(rows), inFlight)
	}
	for _, row := range rows {
		if row.Outcome != string(schemas.OutcomeInfraFailure) || !strings.Contains(row.Error, "cancel --drop") || row.NumTurns < 1 || row.NumTurns >= maxTurns {
			t.Errorf("episode %s: outcome %s after %d turns (%q); want infra_failure saying cancel --drop, before turn %d",
				row.EpisodeID, row.Outcome, row.NumTurns, row.Error, maxTurns)
		}
	}
}

// readRunMaybe reads a run's rows, or none while the store has none.
func readRunMaybe(ctx context.Context, storeURL, runID string) []parquet.Row {
	st, err := store.Open(ctx, storeURL, store.Options{})
	if err != nil {
		return nil
	}
	rows, _ := st.ReadRun(ctx, runID)
	return rows
}
