package mimicfhir

import (
	"reflect"
	"testing"
	"time"
)

func TestGenerateTasks(t *testing.T) {
	src := demoSource(t)
	a, err := GenerateTasks(t.Context(), src.Demo)
	if err != nil {
		t.Fatal(err)
	}
	b, err := GenerateTasks(t.Context(), src.Demo)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two generations differ")
	}
	counts := TaskCounts(a)
	t.Logf("%d tasks: %v", len(a), counts)
	for _, typ := range []string{TaskPatientLookup, TaskAge, TaskLatestMg24h, TaskAvgGlucose24h, TaskLatestGlucose} {
		if n := counts[typ+"/train"] + counts[typ+"/test"]; n < 100 || counts[typ+"/test"] == 0 {
			t.Errorf("%s: %d tasks (%d test), want at least 100 and some in test", typ, n, counts[typ+"/test"])
		}
	}
	ids := map[string]bool{}
	split := map[string]string{}
	none := map[string]int{}
	for _, tk := range a {
		if ids[tk.ID] {
			t.Errorf("duplicate task id %s", tk.ID)
		}
		ids[tk.ID] = true
		if s, ok := split[tk.MRN]; ok && s != tk.Split {
			t.Errorf("patient %s is in both splits", tk.MRN)
		}
		split[tk.MRN] = tk.Split
		if _, err := time.Parse(time.RFC3339, tk.Now); err != nil {
			t.Errorf("%s: now %q: %v", tk.ID, tk.Now, err)
		}
		if tk.Answer == -1.0 || tk.Answer == NotFound {
			none[tk.Type]++
		}
	}
	tests := 0
	for _, s := range split {
		if s == "test" {
			tests++
		}
	}
	if tests < 10 || tests > 35 {
		t.Errorf("%d of %d patients in test, want about one in five", tests, len(split))
	}
	// Each type has instances whose answer is "none" (-1, not found) and
	// instances with a value.
	for _, typ := range []string{TaskPatientLookup, TaskLatestMg24h, TaskAvgGlucose24h, TaskLatestGlucose} {
		n := counts[typ+"/train"] + counts[typ+"/test"]
		if none[typ] == 0 || none[typ] == n {
			t.Errorf("%s: %d of %d answers are none", typ, none[typ], n)
		}
	}
}

// The truths on hand-checked rows: labevents of subject 10014354 hold
// magnesium 2.0 at 2148-08-16 00:00:00 (labevent 172086) and 1.8 at
// 2148-08-24 00:00:00 (172595).
func TestTaskTruthsByHand(t *testing.T) {
	rows := []labRow{
		{at: time.Date(2148, 8, 16, 0, 0, 0, 0, time.UTC), value: 2.0, ok: true},
		{at: time.Date(2148, 8, 24, 0, 0, 0, 0, time.UTC), value: 1.8, ok: true},
	}
	for _, c := range []struct {
		now  time.Time
		want float64
	}{
		{time.Date(2148, 8, 16, 0, 0, 0, 0, time.UTC), 2.0},  // at the result: included
		{time.Date(2148, 8, 17, 0, 0, 0, 0, time.UTC), 2.0},  // 24 h after: included
		{time.Date(2148, 8, 17, 0, 0, 1, 0, time.UTC), -1},   // a second more: none
		{time.Date(2148, 8, 24, 12, 0, 0, 0, time.UTC), 1.8}, // the later one
	} {
		if got, ok := latestIn(rows, c.now, day); !ok || got != c.want {
			t.Errorf("latest at %s = %v (ok %v), want %v", c.now, got, ok, c.want)
		}
	}
	if got := averageIn(append(rows, labRow{at: rows[1].at.Add(time.Hour), value: 2.4, ok: true}), rows[1].at.Add(2*time.Hour)); got != 2.1 {
		t.Errorf("average = %v, want 2.1", got)
	}
	if got, ok := latestIn(rows, time.Date(2149, 1, 1, 0, 0, 0, 0, time.UTC), 0); !ok || got != 1.8 {
		t.Errorf("latest without a window = %v (ok %v), want 1.8", got, ok)
	}
	if got, ok := latestIn(append(rows, labRow{at: rows[1].at}), rows[1].at, day); ok {
		t.Errorf("a result without a value at the latest time: %v, want ambiguous", got)
	}
	if got := ageAt("2104-05-17", time.Date(2125, 5, 16, 23, 0, 0, 0, time.UTC)); got != 20 {
		t.Errorf("age the day before the 21st birthday = %d", got)
	}
	if got := ageAt("2104-05-17", time.Date(2125, 5, 17, 0, 0, 0, 0, time.UTC)); got != 21 {
		t.Errorf("age on the 21st birthday = %d", got)
	}
}
