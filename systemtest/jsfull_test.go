package systemtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
)

// TestJetStreamStoreFullMidRun fills an external nats-server's JetStream
// store (its max_file_store) in the middle of a run, so that every
// publish and key-value write is refused with "insufficient resources",
// and loses some episode requests while it is full (deleted before any
// worker got them: what a message that ran out of deliveries while its
// dead letter could not be stored leaves behind). Then it frees the space.
// Nothing is restarted: the services retry while the store is full, the
// dispatcher's reconciliation finds the lost episodes from stored state
// and records them as infra_failure, and the run finishes with every
// planned episode stored exactly once. The space is freed by purging the
// filler, or by raising max_file_store with a configuration reload.
func TestJetStreamStoreFullMidRun(t *testing.T) {
	for _, how := range []string{"purge", "reload"} {
		t.Run(how, func(t *testing.T) { storeFullMidRun(t, how == "reload") })
	}
}

func storeFullMidRun(t *testing.T, reload bool) {
	const (
		episodes  = 24
		fullAfter = 6
	)
	natsBin := natsServerBinary(t)
	work := t.TempDir()
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(work, "nats.conf")
	writeConf := func(maxStore string) {
		t.Helper()
		if err := os.WriteFile(conf, fmt.Appendf(nil, "listen: %q\njetstream {\n  store_dir: %q\n  max_file_store: %s\n}\n",
			net.JoinHostPort(host, port), filepath.Join(work, "nats"), maxStore), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConf("64MB")
	logf, err := os.Create(filepath.Join(work, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ns := &proc{t: t, name: "nats-server", log: logf, args: []string{natsBin, "-c", conf}}
	ns.start()
	defer ns.stop()
	waitListening(t, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.NATS = "nats://" + addr
	f.Limit, f.RunID, f.MaxInFlight, f.LogLevel = episodes, "jsfull", 8, "info"
	// A 64 MB store cannot reserve the default 1 GiB of dead letters.
	f.Streams.DeadLetterMaxBytes = 4 << 20
	// One step at a time per worker stage: the other messages in flight
	// wait in their streams, undelivered, while the store is full. The
	// verifier scores several at once, so that finished episodes (whose
	// loss reconciliation can record only once the result's id has left
	// the dedupe window) do not hold every slot.
	f.LLM.Concurrency, f.Sandbox.Concurrency, f.Verifier.Concurrency = 1, 1, 4
	f.Dispatcher.Reconcile = 4 * time.Second
	logs := &syncBuffer{}
	conn, err := bus.Connect(ctx, f.NATS, "test", cli.NewLogger(logs, "warn"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, f.Streams); err != nil {
		t.Fatal(err)
	}
	r := startRun(t, ctx, conn, f, logs)
	waitDone(t, ctx, conn, "jsfull", fullAfter, r)
	// Whichever worker stage is behind holds undelivered messages: lose
	// up to two of them (deleted before any worker got them), then fill
	// the store at once. The reconciliation needs two passes, 4 s apart,
	// to record a lost episode: the store is full by then.
	stages := []struct{ stream, durable string }{
		{schemas.StreamEpisodes, schemas.DurableLLMEpisodes},
		{schemas.StreamActions, schemas.DurableSandboxActions},
		{schemas.StreamObservations, schemas.DurableVerifierObs},
		{schemas.StreamChecks, schemas.DurableLLMChecks},
	}
	var lost []string
	requests := map[string]bool{} // lost episode requests
	for len(lost) == 0 {
		for _, st := range stages {
			ids, err := bustest.DeleteUndelivered(ctx, f.NATS, st.stream, st.durable, 2-len(lost))
			if err != nil {
				t.Fatal(err)
			}
			lost = append(lost, ids...)
			for _, id := range ids {
				requests[id] = st.stream == schemas.StreamEpisodes
			}
		}
		if len(lost) > 0 {
			break
		}
		select {
		case <-r.done:
			t.Fatalf("run ended before an episode message waited: %+v %v", r.res, r.err)
		case <-ctx.Done():
			t.Fatalf("never an episode message waiting\n%s", stallReport(conn))
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Logf("lost requests %v", lost)

	written, free, err := bustest.FillStore(ctx, f.NATS, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("store full after %d filler bytes", written)
	// The services meet the full store and keep retrying.
	for !strings.Contains(logs.String(), "JetStream storage full") {
		select {
		case <-r.done:
			t.Fatalf("run ended while the store was full: %+v %v\n%s", r.res, r.err, tail(logs.String(), 6000))
		case <-ctx.Done():
			t.Fatalf("no service met the full store\n%s", tail(logs.String(), 6000))
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Usually two reconciliations while full, whose records fail and are
	// retried. The look is conservative: while a worker holds a message it
	// cannot settle (the store is full), an episode acked above that
	// consumer's ack floor still counts as in play, and is recorded only
	// once the store is free. So the test waits at most 8 passes.
	for wait := time.After(8 * f.Dispatcher.Reconcile); strings.Count(logs.String(), "reconciliation failed") < 2; {
		select {
		case <-ctx.Done():
			t.Fatalf("the dispatcher never tried to record the lost episodes\n%s", tail(logs.String(), 6000))
		case <-wait:
			t.Logf("no record of a lost episode tried while the store was full (the look was conservative)")
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	if reload {
		t.Cleanup(func() { _ = free(context.Background()) })
		writeConf("128MB")
		if err := ns.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		t.Log("max_file_store raised")
	} else {
		if err := free(ctx); err != nil {
			t.Fatal(err)
		}
		t.Log("store freed")
	}

	select {
	case <-r.done:
	case <-ctx.Done():
		natsLog, _ := os.ReadFile(logf.Name())
		t.Fatalf("run did not finish after the store was freed\n%s\n%s\nnats-server:\n%s", tail(logs.String(), 6000), stallReport(conn), tail(string(natsLog), 3000))
	}
	if r.err != nil {
		t.Fatalf("run: %v\n%s", r.err, tail(logs.String(), 6000))
	}
	// A lost episode request may also run after all: the dispatcher
	// publishes it again when the record of its progress failed while the
	// store was full. Any other lost message ends its episode as an
	// infra_failure.
	mustFail := 0
	for _, id := range lost {
		if !requests[id] {
			mustFail++
		}
	}
	infra := r.res.Outcomes[schemas.OutcomeInfraFailure]
	if r.res.Total != episodes || r.res.Outcomes[schemas.OutcomeCorrect]+infra != episodes || infra < mustFail || infra > len(lost) {
		t.Fatalf("outcomes %v of %d episodes, want %d to %d infra_failure (lost %v), the others correct", r.res.Outcomes, r.res.Total, mustFail, len(lost), lost)
	}
	files, _ := filepath.Glob(filepath.Join(f.Store, "trajectories", "run=jsfull", "*", "*.parquet"))
	total := 0
	for _, p := range files {
		total += countRows(t, p)
	}
	rows := readRun(t, ctx, f.Store, "jsfull")
	if len(rows) != episodes || total != episodes {
		t.Fatalf("%d episodes, %d rows across %d files; want %d stored once", len(rows), total, len(files), episodes)
	}
	for _, row := range rows {
		isLost, request := false, false
		for _, id := range lost {
			if slices.Contains(strings.Split(id, "/"), row.EpisodeID) {
				isLost, request = true, requests[id]
			}
		}
		failed := row.Outcome == string(schemas.OutcomeInfraFailure)
		if (isLost && !request && !failed) || (!isLost && failed) || (!failed && row.Outcome != string(schemas.OutcomeCorrect)) {
			t.Errorf("episode %s: outcome %s (lost: %v, a request: %v)", row.EpisodeID, row.Outcome, isLost, request)
		}
		if failed && !strings.Contains(row.Error, "lost in the pipeline") {
			t.Errorf("lost episode %s: error %q, want the reconciliation's reason", row.EpisodeID, row.Error)
		}
	}
	if !strings.Contains(logs.String(), "JetStream stores again") {
		t.Errorf("no handler logged that JetStream stores again\n%s", tail(logs.String(), 6000))
	}
}
