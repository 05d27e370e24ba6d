package systemtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
)

// TestServicesStartBeforeNATS (robust item 1): Kubernetes starts pods
// before the NATS pod is ready, and compose starts everything at once; a
// service that found no server used to exit 1 at once (a crash loop).
// Every service kind (dispatcher, two llm-workers, two sandbox-workers,
// the verifier, each its own process with default flags) and `medgym run
// --nats` start while nothing listens on the NATS address; each logs that
// it waits, none exits; nats-server starts only after all of them said so,
// and the run completes with every episode stored once.
func TestServicesStartBeforeNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: external processes")
	}
	c := newProcCluster(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c.failOnExit(cancel)

	const episodes = 12
	f := baseFlags(t)
	f.NATS, f.Store, f.Library = c.url, c.store, c.library
	f.Limit, f.RunID, f.MaxInFlight = episodes, "early", 4
	f.ConnectTimeout = 4 * time.Minute
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	runLog := &syncBuffer{}
	f.LogLevel = "info"
	type result struct {
		res cli.RunResult
		err error
	}
	ran := make(chan result, 1)
	go func() {
		res, err := cli.RunSpec(ctx, spec, f, runLog)
		ran <- result{res, err}
	}()

	// Every process says it waits for NATS (and none has exited: failOnExit).
	waiting := `msg="waiting for NATS`
	for c.logCount(waiting) < len(c.procs) || !strings.Contains(runLog.String(), waiting) {
		select {
		case r := <-ran:
			t.Fatalf("medgym run ended without a server: %+v %v", r.res, r.err)
		case <-ctx.Done():
			t.Fatalf("%d of %d services logged that they wait for NATS; medgym run: %v\n%s", c.logCount(waiting), len(c.procs),
				strings.Contains(runLog.String(), waiting), tail(runLog.String(), 2000))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if strings.Contains(runLog.String(), "submitted") {
		t.Fatal("a run was submitted before NATS was up")
	}
	t.Logf("every service and medgym run wait for NATS; starting nats-server")
	c.nats.start()

	var r result
	select {
	case r = <-ran:
	case <-ctx.Done():
		t.Fatalf("run did not finish after nats-server came up\n%s", tail(runLog.String(), 4000))
	}
	if r.err != nil {
		t.Fatalf("run: %v\n%s", r.err, tail(runLog.String(), 4000))
	}
	if r.res.Total != episodes || r.res.Outcomes[schemas.OutcomeCorrect] != episodes {
		t.Fatalf("outcomes %v of %d episodes, want %d correct", r.res.Outcomes, r.res.Total, episodes)
	}
	if _, total := storedOnce(t, c.store, "early"); total != episodes {
		t.Fatalf("%d rows across the run's files, want %d", total, episodes)
	}
	if n := c.logCount("nats connected"); n < len(c.procs) {
		t.Errorf("%d of %d services logged their connection", n, len(c.procs))
	}
}
