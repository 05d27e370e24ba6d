package dispatch

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

func mkTasks(n int) []tasks.Task {
	ts := make([]tasks.Task, n)
	for i := range ts {
		ts[i].View = schemas.TaskView{ID: fmt.Sprintf("ds-%d", i), Dataset: "ds", Category: fmt.Sprintf("c%d", i%3), Question: "q"}
	}
	return ts
}

func TestPlanTemperatureScheduleAndIDs(t *testing.T) {
	t.Parallel()
	spec := schemas.RunSpec{RunID: "r1", Samples: 3, Temperatures: []float64{0, 0.6},
		Policy: schemas.PolicySpec{Name: schemas.PolicyReference}, Options: schemas.DefaultOptions()}
	p := mustPlan(t, spec, mkTasks(2))
	if p.Len() != 6 {
		t.Fatalf("episodes = %d, want 6", p.Len())
	}
	seen := map[string]bool{}
	for i := range p.Len() {
		r := p.Request(i, time.Unix(0, 0))
		if err := r.Validate(); err != nil {
			t.Fatalf("request %d invalid: %v", i, err)
		}
		if seen[r.EpisodeID] {
			t.Fatalf("duplicate episode id %s", r.EpisodeID)
		}
		seen[r.EpisodeID] = true
		want := 0.6
		if r.SampleIndex == 0 {
			want = 0
		}
		if r.Policy.Temperature == nil || *r.Policy.Temperature != want {
			t.Fatalf("sample %d temperature = %v, want %v", r.SampleIndex, r.Policy.Temperature, want)
		}
		if j, ok := p.Lookup(r.EpisodeID); !ok || j != i {
			t.Fatalf("lookup %s = %d,%v want %d", r.EpisodeID, j, ok, i)
		}
	}
	if got := EpisodeID("r1", "a/b c", 2); got != "r1--a_b_c-k2" {
		t.Fatalf("EpisodeID sanitising = %q", got)
	}
}

func TestPlanSeedPerSample(t *testing.T) {
	t.Parallel()
	seed := int64(40)
	spec := schemas.RunSpec{RunID: "r1", Samples: 3,
		Policy: schemas.PolicySpec{Name: schemas.PolicyReference, Seed: &seed}, Options: schemas.DefaultOptions()}
	p := mustPlan(t, spec, mkTasks(2))
	for i := range p.Len() {
		r := p.Request(i, time.Unix(0, 0))
		if r.Policy.Seed == nil || *r.Policy.Seed != 40+int64(r.SampleIndex) {
			t.Fatalf("sample %d seed = %v, want %d", r.SampleIndex, r.Policy.Seed, 40+r.SampleIndex)
		}
	}
	if seed != 40 || *p.Spec.Policy.Seed != 40 {
		t.Fatalf("the run spec's seed changed to %d", *p.Spec.Policy.Seed)
	}
	spec.Policy.Seed = nil
	if r := mustPlan(t, spec, mkTasks(1)).Request(1, time.Unix(0, 0)); r.Policy.Seed != nil {
		t.Fatalf("unseeded run sent seed %d", *r.Policy.Seed)
	}
}

func mustPlan(t testing.TB, spec schemas.RunSpec, ts []tasks.Task) *Plan {
	t.Helper()
	p, err := NewPlan(spec, ts, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanRefusesTooLarge: 1e6 and 2e9 samples (and an overflowing
// product) are refused with an error that names the limit and the fix;
// exactly the limit is accepted.
func TestPlanRefusesTooLarge(t *testing.T) {
	t.Parallel()
	spec := schemas.RunSpec{RunID: "big", Policy: schemas.PolicySpec{Name: schemas.PolicyReference}, Options: schemas.DefaultOptions()}
	for _, c := range []struct {
		tasks, samples, limit int
		ok                    bool
	}{
		{20, 1_000_000, 0, false},
		{1, 2_000_000_000, 0, false},
		{3, math.MaxInt/2 + 1, 0, false},
		{1, 1_000_000, 0, true},
		{10, 100, 1000, true},
		{10, 101, 1000, false},
	} {
		spec.Samples = c.samples
		_, err := NewPlan(spec, mkTasks(c.tasks), c.limit)
		if c.ok != (err == nil) {
			t.Fatalf("%d tasks × %d samples (limit %d): err = %v, want ok=%v", c.tasks, c.samples, c.limit, err, c.ok)
		}
		if err != nil && (!errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--max-episodes") ||
			!strings.Contains(err.Error(), fmt.Sprint(c.samples))) {
			t.Fatalf("refusal does not say why and how to fix it: %v", err)
		}
	}
}

// TestPlanLookupRoundTrip: every planned id maps back to its index, and ids
// of another run, unknown tasks, samples beyond K or non-canonical numbers
// are not found.
func TestPlanLookupRoundTrip(t *testing.T) {
	t.Parallel()
	spec := schemas.RunSpec{RunID: "r-1", Samples: 7, Policy: schemas.PolicySpec{Name: schemas.PolicyReference}, Options: schemas.DefaultOptions()}
	ts := mkTasks(5)
	ts[3].View.ID = "odd.id/é-k2" // sanitised, and contains "-k"
	p := mustPlan(t, spec, ts)
	for i := range p.Len() {
		id := p.Request(i, time.Unix(0, 0)).EpisodeID
		if j, ok := p.Lookup(id); !ok || j != i {
			t.Fatalf("Lookup(%s) = %d,%v; want %d", id, j, ok, i)
		}
	}
	for _, id := range []string{
		"r-2--ds-0-k0", "r-1--ds-9-k0", "r-1--ds-0-k7", "r-1--ds-0-k-1", "r-1--ds-0-k01", "r-1--ds-0-k+1",
		"r-1--ds-0", "r-1-ds-0-k0", "r-1--ds-0-k99999999999999999999", "",
	} {
		if j, ok := p.Lookup(id); ok {
			t.Fatalf("Lookup(%q) found %d", id, j)
		}
	}
	dup := mkTasks(2)
	dup[1].View.ID = "ds/0"
	dup[0].View.ID = "ds_0"
	if _, err := NewPlan(spec, dup, 0); err == nil {
		t.Fatal("two task ids naming the same episodes were accepted")
	}
}

func TestCompletionBits(t *testing.T) {
	t.Parallel()
	var c []byte
	var fresh bool
	for _, i := range []int{0, 9, 17, ChunkBits + 3} { // the last is bit 3 of the next chunk
		if c, fresh = Mark(c, i); !fresh {
			t.Fatalf("bit %d reported set before", i)
		}
	}
	if _, fresh = Mark(c, 9); fresh {
		t.Fatal("bit 9 marked twice")
	}
	// Mark takes a chunk's own bits: episode ChunkBits+3 is bit 3.
	for _, tc := range []struct{ bits, want int }{{0, 0}, {1, 1}, {3, 1}, {4, 2}, {9, 2}, {10, 3}, {18, 4}, {ChunkBits, 4}} {
		if got := Count(c, tc.bits); got != tc.want {
			t.Errorf("Count(first %d) = %d, want %d", tc.bits, got, tc.want)
		}
	}
	if Chunks(ChunkBits) != 1 || Chunks(ChunkBits+1) != 2 || ChunkLen(ChunkBits+1, 1) != 1 {
		t.Fatal("chunk arithmetic")
	}
}

// TestPlanMemoryIndependentOfSamples: planning 1 or 1,000,000 samples of
// the same tasks allocates the same, and so does building a request or
// looking an id up. Measured in allocations, not time.
func TestPlanMemoryIndependentOfSamples(t *testing.T) {
	ts := mkTasks(50)
	spec := schemas.RunSpec{RunID: "mem", Policy: schemas.PolicySpec{Name: schemas.PolicyReference}, Options: schemas.DefaultOptions()}
	allocs := func(samples int) (plan, req, lookup float64) {
		spec.Samples = samples
		plan = testing.AllocsPerRun(20, func() { _, _ = NewPlan(spec, ts, 0) })
		p := mustPlan(t, spec, ts)
		last := p.Len() - 1
		id := p.Request(last, time.Unix(0, 0)).EpisodeID
		req = testing.AllocsPerRun(20, func() { _ = p.Request(last, time.Unix(0, 0)) })
		lookup = testing.AllocsPerRun(20, func() { _, _ = p.Lookup(id) })
		return plan, req, lookup
	}
	p1, r1, l1 := allocs(200) // 10,000 episodes (sample numbers of 3 digits and more in both)
	pN, rN, lN := allocs(1_000_000 / 50)
	if pN != p1 || rN != r1 || lN != l1 {
		t.Fatalf("allocations grow with samples: plan %v→%v, request %v→%v, lookup %v→%v", p1, pN, r1, rN, l1, lN)
	}
	// Positive control: the eager plan this replaced allocated per episode.
	eager := testing.AllocsPerRun(5, func() {
		ids := make(map[string]int)
		for i := range 1000 {
			ids[EpisodeID("mem", "t", i)] = i
		}
	})
	if eager <= p1 {
		t.Fatalf("control: an eager plan of 1000 episodes allocated %v ≤ the lazy plan's %v", eager, p1)
	}
	t.Logf("allocations: plan %v, request %v, lookup %v (eager 1000-episode index: %v)", p1, r1, l1, eager)
}

func BenchmarkPlanMillion(b *testing.B) {
	ts := mkTasks(100)
	spec := schemas.RunSpec{RunID: "bench", Samples: 10_000, Policy: schemas.PolicySpec{Name: schemas.PolicyReference}, Options: schemas.DefaultOptions()}
	b.ReportAllocs()
	for b.Loop() {
		p, err := NewPlan(spec, ts, 0)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = p.Lookup(p.Request(p.Len()-1, time.Unix(0, 0)).EpisodeID)
	}
}

func TestCheckReferences(t *testing.T) {
	t.Parallel()
	ts := mkTasks(3)
	ts[0].Reference, ts[2].Reference = "print(1)", "print(2)"
	ref := schemas.RunSpec{RunID: "r", Policy: schemas.PolicySpec{Name: schemas.PolicyReference}}
	err := CheckReferences(ref, ts)
	if !errors.Is(err, ErrNoReferences) || !strings.Contains(err.Error(), "1 of 3") || !strings.Contains(err.Error(), "ds-1") {
		t.Fatalf("a reference run with a task lacking its reference: %v", err)
	}
	if err := CheckReferences(ref, []tasks.Task{ts[0], ts[2]}); err != nil {
		t.Fatalf("every task has a reference: %v", err)
	}
	if err := CheckReferences(schemas.RunSpec{RunID: "r", Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI}}, ts); err != nil {
		t.Fatalf("an openai run needs no reference: %v", err)
	}
}
