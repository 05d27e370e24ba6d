package dispatch

import (
	"maps"
	"testing"
)

// TestFairShares: max-min fair division of the in-flight slots: small
// demands are met in full, the rest is split equally (remainder first to
// the runs first in (demand, id) order), nobody gets more than it asks,
// and every run that asks gets at least one slot.
func TestFairShares(t *testing.T) {
	for _, tc := range []struct {
		name    string
		total   int
		demands map[string]int
		want    map[string]int
	}{
		{"alone, capped", 16, map[string]int{"large": 500}, map[string]int{"large": 16}},
		{"alone, under the cap", 16, map[string]int{"small": 4}, map[string]int{"small": 4}},
		{"small met in full, large takes the rest", 16, map[string]int{"large": 500, "small": 4}, map[string]int{"large": 12, "small": 4}},
		{"two large split equally", 16, map[string]int{"a": 100, "b": 500}, map[string]int{"a": 8, "b": 8}},
		{"remainder to the first", 10, map[string]int{"a": 100, "b": 100, "c": 100}, map[string]int{"a": 4, "b": 3, "c": 3}},
		{"all fit", 64, map[string]int{"a": 10, "b": 20, "c": 5}, map[string]int{"a": 10, "b": 20, "c": 5}},
		{"a finished run takes nothing", 16, map[string]int{"done": 0, "large": 500}, map[string]int{"done": 0, "large": 16}},
		{"more runs than slots: one each", 2, map[string]int{"a": 5, "b": 5, "c": 5}, map[string]int{"a": 1, "b": 1, "c": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fairShares(tc.total, tc.demands)
			if !maps.Equal(got, tc.want) {
				t.Fatalf("fairShares(%d, %v) = %v, want %v", tc.total, tc.demands, got, tc.want)
			}
			sum := 0
			for id, n := range got {
				sum += n
				if n > tc.demands[id] {
					t.Errorf("run %s got %d slots, asked for %d", id, n, tc.demands[id])
				}
			}
			if sum > tc.total && sum > len(tc.demands) {
				t.Errorf("%d slots handed out of %d", sum, tc.total)
			}
		})
	}
}

// queuePosition is how many requests of other runs the bus carried before
// run's first one: what a worker taking requests in order works through
// before it reaches the run.
func queuePosition(t *testing.T, f *fixture, run string) int {
	t.Helper()
	for i, r := range f.bus.requests() {
		if r.RunID == run {
			return i
		}
	}
	t.Fatalf("no request of run %s published", run)
	return 0
}

// TestSmallRunGetsItsShare (issue 17, fairness): a large run whose own
// max_in_flight lets it queue all its 500 episodes is held to the
// dispatcher's MaxInFlightTotal (16); a small evaluation run submitted
// after it gets its 4 episodes published at once, queued behind at most 16
// of the large run's, and the large run publishes nothing more until it is
// back under its share; when the small run is done the large one gets every
// slot again. Positive control: with no dispatcher-wide bound (-1) the
// small run's requests queue behind all 500 of the large run's.
func TestSmallRunGetsItsShare(t *testing.T) {
	for _, tc := range []struct {
		name   string
		total  int
		behind int // large requests queued before the small run's first
	}{
		{"fair share", 16, 16},
		{"control: no dispatcher-wide bound", -1, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.total = tc.total
			d := f.dispatcher()
			if err := d.Submit(f.ctx, f.spec("large", 10, 50, 500)); err != nil {
				t.Fatal(err)
			}
			f.stepOK(d, "large")
			if err := d.Submit(f.ctx, f.spec("small", 4, 1, 64)); err != nil {
				t.Fatal(err)
			}
			f.stepOK(d, "small")
			if got := f.status("small").Published; got != 4 {
				t.Fatalf("small run: %d of 4 published at once", got)
			}
			if got := queuePosition(t, f, "small"); got != tc.behind {
				t.Fatalf("small run queued behind %d of the large run's requests, want %d", got, tc.behind)
			}
			if tc.total < 0 {
				return
			}
			// Large: 16 in flight, its share 12 now: nothing more until
			// fewer than 12 are in flight.
			for i := range 4 {
				f.score(d, "large", i)
			}
			f.stepOK(d, "large")
			if got := f.status("large").Published; got != 16 {
				t.Fatalf("large run over its share published more: %d", got)
			}
			f.score(d, "large", 4)
			f.stepOK(d, "large")
			if got := f.status("large").Published; got != 17 {
				t.Fatalf("large run under its share (11 in flight of 12): %d published, want 17", got)
			}
			// The small run's four scored: it finishes, and the large run
			// has all 16 slots again.
			reqs := f.bus.requests()
			for i, r := range reqs {
				if r.RunID == "small" {
					f.score(d, "small", i)
				}
			}
			if err := f.step(d, "small"); err == nil || !f.status("small").Finished {
				t.Fatalf("small run not finished after its 4 scores: %v %+v", err, f.status("small"))
			}
			f.stepOK(d, "large")
			if got := f.status("large").Published; got != 5+16 { // 5 scored, 16 in flight
				t.Fatalf("large run alone again: %d published, want %d (5 scored + 16 in flight)", got, 5+16)
			}
		})
	}
}
