package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkPandasGroupby/warm-2         	       1	   8207052 ns/op	         8.194 p50-ms	         8.194 p95-ms
BenchmarkPandasGroupby/cold-2         	       1	 292364414 ns/op	       292.4 p50-ms	       292.4 p95-ms
warm         p50      8.2 ms   p95      8.2 ms
BenchmarkSandboxScaling-2   	1	9000 ns/op	3.07 episodes/s-1w	5.95 episodes/s-2w
PASS
`

func TestParseAndReport(t *testing.T) {
	res := parse(strings.NewReader(sample))
	if got := res["BenchmarkPandasGroupby/cold"]["p50-ms"]; got != 292.4 {
		t.Fatalf("cold p50 = %v", got)
	}
	if len(res) != 3 {
		t.Fatalf("parsed %d benchmarks: %v", len(res), res)
	}
	var sandbox, scaling suite
	for _, s := range suites {
		switch s.Name {
		case "sandbox":
			sandbox = s
		case "scaling":
			scaling = s
		}
	}
	lines := report(sandbox, res)
	if !strings.Contains(lines[0], "35.68x") || !strings.Contains(lines[1], "not measured") {
		t.Fatalf("sandbox lines %q", lines)
	}
	lines = report(scaling, res)
	if !strings.Contains(lines[0], "1.94x") || !strings.Contains(lines[1], "not measured") {
		t.Fatalf("scaling lines %q", lines)
	}
}

// TestTargets checks that a ratio target is not met by a slow baseline
// alone: the absolute target on the warm figure fails with it.
func TestTargets(t *testing.T) {
	var sandbox suite
	for _, s := range suites {
		if s.Name == "sandbox" {
			sandbox = s
		}
	}
	fast := parse(strings.NewReader("BenchmarkPandasGroupby/warm-2 1 1 ns/op 5.0 p50-ms\nBenchmarkPandasGroupby/cold-2 1 1 ns/op 300 p50-ms\n"))
	if lines, missed := checkTargets(sandbox, fast); missed != 0 {
		t.Fatalf("fast warm: %d missed: %q", missed, lines)
	}
	// 60x, but only because cold is slow: the absolute warm target misses.
	slowCold := parse(strings.NewReader("BenchmarkPandasGroupby/warm-2 1 1 ns/op 30 p50-ms\nBenchmarkPandasGroupby/cold-2 1 1 ns/op 1800 p50-ms\n"))
	lines, missed := checkTargets(sandbox, slowCold)
	if missed != 1 || !strings.Contains(lines[0], "MISSED") || !strings.Contains(lines[1], "60.00x") {
		t.Fatalf("slow cold: %d missed: %q", missed, lines)
	}
	// A fast warm pool but a ratio under 50x misses the ratio.
	lines, missed = checkTargets(sandbox, parse(strings.NewReader("BenchmarkPandasGroupby/warm-2 1 1 ns/op 8 p50-ms\nBenchmarkPandasGroupby/cold-2 1 1 ns/op 300 p50-ms\n")))
	if missed != 1 || !strings.Contains(lines[1], "MISSED") {
		t.Fatalf("low ratio: %d missed: %q", missed, lines)
	}
	lines, missed = checkTargets(sandbox, results{})
	if missed != 0 || !strings.Contains(lines[0], "not measured") {
		t.Fatalf("nothing measured: %d missed: %q", missed, lines)
	}
}

// TestResultsFile: the results file starts with the machine, the date and
// the commit, and holds each printed figure as a table row.
func TestResultsFile(t *testing.T) {
	var b strings.Builder
	m := machine{CPU: "Test CPU", Cores: 2, Memory: "24 GiB", Kernel: "6.1", Go: "go1.26", Load: "0.1 0.2 0.3", Commit: "abc123+dirty"}
	if err := writeHeader(&b, m, []string{"-suite", "store"}); err != nil {
		t.Fatal(err)
	}
	if err := writeLines(&b, []string{"store\tbatched vs single\t3.10x\t310 / 100 rows/s\t"}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{"| commit | abc123+dirty |", "Test CPU, 2 cores", "`go run ./bench -suite store`", "| 0.1 0.2 0.3 |",
		"| store | batched vs single | 3.10x | 310 / 100 rows/s |"} {
		if !strings.Contains(got, want) {
			t.Errorf("results file lacks %q:\n%s", want, got)
		}
	}
	if real := describeMachine(".."); real.Cores < 1 || real.Commit == "" || real.Started.IsZero() {
		t.Errorf("machine %+v", real)
	}
}
