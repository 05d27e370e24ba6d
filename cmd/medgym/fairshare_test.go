package main

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
)

// TestSmallRunFairShare (issue 17, fairness): a large run whose own
// max_in_flight would queue all its 300 episodes at once is held by the
// dispatcher to a fair share of --max-in-flight-total (16 here), so a small
// evaluation run submitted after it is queued behind at most 16 of the
// large run's requests and finishes while the large one is still going;
// the large run then finishes too. Positive control: with no
// dispatcher-wide bound (-1) the small run's requests queue behind all of
// the large run's, and it finishes only when the large run is nearly done.
func TestSmallRunFairShare(t *testing.T) {
	const largeEpisodes = 300
	for _, tc := range []struct {
		name    string
		total   int
		control bool
	}{
		{"fair share of 16", 16, false},
		{"control: no dispatcher-wide bound", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			llm := httptest.NewServer(fakellm.New(fakellm.Config{Script: []string{actionJSON("answer", "answer", "42")},
				LatencyMean: 100 * time.Millisecond, Model: "fake"}))
			defer llm.Close()
			base := baseFlags(t)
			base.dispatcher.MaxInFlightTotal = tc.total
			url, _ := startCluster(t, ctx, base.serviceFlags, 0)
			conn, err := bus.Connect(ctx, url, "watch", newLogger(io.Discard, "error"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			mk := func(run string, limit, samples, inFlight int) *runFlags {
				f := *base
				f.nats, f.runID, f.limit, f.samples, f.maxInFlight = url, run, limit, samples, inFlight
				f.policy, f.llmURL, f.model = "openai", llm.URL+"/v1", "fake"
				return &f
			}
			large, small := mk("large", largeEpisodes/2, 2, largeEpisodes), mk("small", 4, 1, 64)
			type result struct {
				res runResult
				err error
			}
			largeDone := make(chan result, 1)
			go func() {
				res, err := runSpec(ctx, mustSpec(t, large), large, io.Discard)
				largeDone <- result{res, err}
			}()
			for done(ctx, conn, "large") < 10 {
				if ctx.Err() != nil {
					t.Fatal("the large run did not start")
				}
				time.Sleep(50 * time.Millisecond)
			}
			res, err := runSpec(ctx, mustSpec(t, small), small, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			largeAtSmallEnd := done(ctx, conn, "large")
			if res.Total != 4 {
				t.Fatalf("small run: %d episodes", res.Total)
			}
			t.Logf("small run (4 episodes) finished when the large run had %d of %d done", largeAtSmallEnd, largeEpisodes)
			switch {
			case !tc.control && largeAtSmallEnd >= largeEpisodes/2:
				t.Fatalf("the small run finished only when the large one had %d of %d episodes done", largeAtSmallEnd, largeEpisodes)
			case tc.control && largeAtSmallEnd < largeEpisodes*3/4:
				t.Fatalf("control: without a dispatcher-wide bound the small run still finished early (large run at %d of %d): the test cannot tell",
					largeAtSmallEnd, largeEpisodes)
			}
			lr := <-largeDone
			if lr.err != nil || lr.res.Total != largeEpisodes {
				t.Fatalf("large run: %+v %v", lr.res, lr.err)
			}
		})
	}
}
