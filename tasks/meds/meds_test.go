package meds

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/tasks"
)

// TestReadChartItems reads the MEDS copy of the MIMIC-IV demo and checks
// the per-item counts its PROVENANCE publishes (the first seven agree with
// the raw chartevents file).
func TestReadChartItems(t *testing.T) {
	path := filepath.Join(tasks.DataRoot(), "mimic-iv-demo", "fallback_meds", "mimic_iv_demo_meds_events.parquet")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s", path)
	}
	want := map[string]int{"220045": 13913, "220210": 13913, "220277": 13540, "220050": 5525, "220051": 5524,
		"220052": 5560, "223762": 391, "224639": 441, "226730": 71}
	got := map[string]int{}
	var first time.Time
	err := Read(t.Context(), path, func(code string) bool { return strings.HasPrefix(code, "LAB//") },
		func(subject int64, ts time.Time, code string, value float32, ok bool) error {
			item, _, _ := strings.Cut(strings.TrimPrefix(code, "LAB//"), "//")
			if _, tracked := want[item]; tracked {
				got[item]++
				if first.IsZero() {
					first = ts
				}
				if subject < 10000000 || !ok {
					t.Fatalf("event %d %s %s without a value or with a bad subject", subject, ts, code)
				}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	for item, n := range want {
		if got[item] != n {
			t.Errorf("item %s: %d events, want %d", item, got[item], n)
		}
	}
	if first.Year() < 2100 || first.Year() > 2220 {
		t.Errorf("first chart time %s: not a MIMIC-IV demo date", first)
	}
	stop := errors.New("stop")
	if err := Read(t.Context(), path, func(string) bool { return true },
		func(int64, time.Time, string, float32, bool) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Read returned %v, want the callback's error", err)
	}
	if err := Read(t.Context(), filepath.Join(t.TempDir(), "missing.parquet"), func(string) bool { return true },
		func(int64, time.Time, string, float32, bool) error { return nil }); err == nil {
		t.Error("a missing file read without error")
	}
}
