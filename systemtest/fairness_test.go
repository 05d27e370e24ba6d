package systemtest

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
)

// TestSmallRunNotStarvedByLargeRun (issue 17, fairness): a run keeps at
// most its max_in_flight episodes requested at once (the dispatcher's
// per-run admission), so a small evaluation run submitted after a large
// one queues behind at most that many of the large run's episodes, not
// behind all of them: it finishes while the large run is still going.
// Positive control: the large run is far from done when the small one
// ends, and it does finish.
func TestSmallRunNotStarvedByLargeRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	llm := httptest.NewServer(fakellm.New(fakellm.Config{Script: []string{actionJSON("answer", "answer", "42")},
		LatencyMean: 100 * time.Millisecond, Model: "fake"}))
	defer llm.Close()
	base := baseFlags(t)
	url, _ := startCluster(t, ctx, base.ServiceFlags, 0)
	conn, err := bus.Connect(ctx, url, "watch", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mk := func(run string, limit, samples, inFlight int) *cli.RunFlags {
		f := *base
		f.NATS, f.RunID, f.Limit, f.Samples, f.MaxInFlight = url, run, limit, samples, inFlight
		f.Policy, f.LLMURL, f.Model = "openai", llm.URL+"/v1", "fake"
		return &f
	}
	large, small := mk("large", 200, 2, 16), mk("small", 4, 1, 16)
	type result struct {
		res cli.RunResult
		err error
	}
	largeDone := make(chan result, 1)
	go func() {
		res, err := cli.RunSpec(ctx, mustSpec(t, large), large, io.Discard)
		largeDone <- result{res, err}
	}()
	for done(ctx, conn, "large") < 20 {
		if ctx.Err() != nil {
			t.Fatal("the large run did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, err := cli.RunSpec(ctx, mustSpec(t, small), small, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	largeAtSmallEnd := done(ctx, conn, "large")
	if res.Total != 4 {
		t.Fatalf("small run: %d episodes", res.Total)
	}
	if largeAtSmallEnd >= 300 {
		t.Fatalf("the small run finished only when the large one had %d of 400 episodes done", largeAtSmallEnd)
	}
	t.Logf("small run (4 episodes) finished while the large run had %d of 400 done", largeAtSmallEnd)
	lr := <-largeDone
	if lr.err != nil || lr.res.Total != 400 {
		t.Fatalf("large run: %+v %v", lr.res, lr.err)
	}
}
