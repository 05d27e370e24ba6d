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

// largeThenSmall starts the services with the dispatcher's
// --max-in-flight-total at total (0: the default), submits a large run of
// largeEpisodes episodes with its own max_in_flight largeInFlight and, once
// 20 of them are scored, a small evaluation run of 4 episodes; it returns
// how many of the large run's episodes were scored when the small run
// finished, after checking that both runs complete.
func largeThenSmall(t *testing.T, total, largeEpisodes, largeInFlight int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	llm := httptest.NewServer(fakellm.New(fakellm.Config{Script: []string{actionJSON("answer", "answer", "42")},
		LatencyMean: 100 * time.Millisecond, Model: "fake"}))
	defer llm.Close()
	base := baseFlags(t)
	base.ServiceFlags.Dispatcher.MaxInFlightTotal = total
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
	large, small := mk("large", largeEpisodes/2, 2, largeInFlight), mk("small", 4, 1, 16)
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
	t.Logf("small run (4 episodes) finished when the large run had %d of %d done", largeAtSmallEnd, largeEpisodes)
	lr := <-largeDone
	if lr.err != nil || lr.res.Total != largeEpisodes {
		t.Fatalf("large run: %+v %v", lr.res, lr.err)
	}
	return largeAtSmallEnd
}

// TestSmallRunNotStarvedByLargeRun (issue 17, fairness): a run keeps at
// most its max_in_flight episodes requested at once (the dispatcher's
// per-run admission), so a small evaluation run submitted after a large
// one queues behind at most that many of the large run's episodes, not
// behind all of them: it finishes while the large run is still going.
// Positive control: the large run is far from done when the small one
// ends, and it does finish.
func TestSmallRunNotStarvedByLargeRun(t *testing.T) {
	if n := largeThenSmall(t, 0, 400, 16); n >= 300 {
		t.Fatalf("the small run finished only when the large one had %d of 400 episodes done", n)
	}
}

// TestSmallRunFairShare (issue 17, fairness): a large run whose own
// max_in_flight would queue all its 300 episodes at once is held by the
// dispatcher to a fair share of --max-in-flight-total (16 here), so a
// small evaluation run submitted after it is queued behind at most 16 of
// the large run's requests and finishes while the large one is still
// going. Positive control: with no dispatcher-wide bound (-1) the small
// run's requests queue behind all of the large run's, and it finishes only
// when the large run is nearly done.
func TestSmallRunFairShare(t *testing.T) {
	t.Run("fair share of 16", func(t *testing.T) {
		if n := largeThenSmall(t, 16, 300, 300); n >= 150 {
			t.Fatalf("the small run finished only when the large one had %d of 300 episodes done", n)
		}
	})
	t.Run("control: no dispatcher-wide bound", func(t *testing.T) {
		if n := largeThenSmall(t, -1, 300, 300); n < 225 {
			t.Fatalf("without a dispatcher-wide bound the small run still finished when the large one had only %d of 300 done: the test cannot tell", n)
		}
	})
}
