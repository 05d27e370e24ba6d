// Command bench runs medgym's Go benchmarks one after another in one
// invocation and prints, per suite, the ratios between figures measured
// side by side in the same run. Absolute numbers depend on the machine;
// the ratios are what to compare across machines.
//
//	go run ./bench                    # every suite
//	go run ./bench -suite store,sandbox -v
//	go run ./bench -out bench/results/$(hostname).md   # also a results file
//
// Each suite is `go test -run '^$' -bench ...` in one package; the harness
// reads the metrics the benchmarks report (b.ReportMetric) from their
// output. MEDGYM_DOCKER=1 adds the Docker backend to the sandbox suite;
// the scaling and concurrency suites need the nats-server that `make
// setup-test` installs and skip without it.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// A ratio divides metric Unit of benchmark Num by that of Den.
type ratio struct {
	What     string
	Num, Den string // benchmark names without the -GOMAXPROCS suffix
	Unit     string
}

// A suite is one `go test -bench` run and the ratios read from it.
type suite struct {
	Name, Pkg, Bench, Benchtime string
	Ratios                      []ratio
	// Show lists single figures worth printing as they are.
	Show []ratio
	// Targets are the goals the suite's figures are held to: each is
	// printed as met or not, and -check makes a missed one fail the run.
	Targets []target
}

// A target bounds a figure (Den empty) or a ratio (as in ratio) from
// below (Min) or above (Max); a zero bound is no bound. A ratio target
// goes with an absolute one on its numerator or denominator, so a slower
// baseline cannot meet it alone.
type target struct {
	ratio
	Min, Max float64
}

var suites = []suite{
	{Name: "store", Pkg: "./store", Bench: "BenchmarkWrite", Benchtime: "3x", Ratios: []ratio{
		{"episodes stored per second, 256 per Write (the verifier's Batcher) / one per Write", "BenchmarkWrite/batch-256", "BenchmarkWrite/batch-1", "rows/s"},
		{"bytes on disk per episode, one per Write / 256 per Write", "BenchmarkWrite/batch-1", "BenchmarkWrite/batch-256", "disk-B/row"},
	}},
	{Name: "rescore", Pkg: "./cmd/medgym/cli", Bench: "BenchmarkRescore", Benchtime: "1x", Show: []ratio{
		{What: "episodes re-scored (MEDGYM_BENCH_RESCORE_ROWS)", Num: "BenchmarkRescore", Unit: "rows"},
		{What: "re-score under the recorded labels, rows/s", Num: "BenchmarkRescore", Unit: "rows/s"},
		{What: "re-score under medcalcbench@v1.0, rows/s", Num: "BenchmarkRescore", Unit: "labels-rows/s"},
		{What: "episodes whose reward flips under medcalcbench@v1.0", Num: "BenchmarkRescore", Unit: "flips"},
	}, Targets: []target{
		{ratio: ratio{"1,000,000 stored episodes re-scored in <= 60 s (>= 16,667 rows/s)", "BenchmarkRescore", "", "labels-rows/s"}, Min: 16667},
	}},
	{Name: "env", Pkg: "./systemtest", Bench: "BenchmarkEnvDoors", Benchtime: "1x", Ratios: []ratio{
		{"env server steps/s at 64 sessions, OpenEnv WebSocket / /v1/sessions", "BenchmarkEnvDoors", "BenchmarkEnvDoors", "openenv-ws-64-steps/s|v1-64-steps/s"},
		{"env server steps/s at 64 sessions, MCP / /v1/sessions", "BenchmarkEnvDoors", "BenchmarkEnvDoors", "mcp-64-steps/s|v1-64-steps/s"},
	}, Show: []ratio{
		{What: "/v1/sessions at 8 sessions: steps/s", Num: "BenchmarkEnvDoors", Unit: "v1-8-steps/s"},
		{What: "/v1/sessions at 64 sessions: steps/s", Num: "BenchmarkEnvDoors", Unit: "v1-64-steps/s"},
		{What: "/v1/sessions at 64 sessions: step p50 (ms)", Num: "BenchmarkEnvDoors", Unit: "v1-64-p50-ms"},
		{What: "/v1/sessions at 64 sessions: step p99 (ms)", Num: "BenchmarkEnvDoors", Unit: "v1-64-p99-ms"},
		{What: "OpenEnv HTTP at 8 sessions: steps/s", Num: "BenchmarkEnvDoors", Unit: "openenv-http-8-steps/s"},
		{What: "OpenEnv HTTP at 64 sessions: steps/s", Num: "BenchmarkEnvDoors", Unit: "openenv-http-64-steps/s"},
		{What: "OpenEnv HTTP at 64 sessions: step p50 (ms)", Num: "BenchmarkEnvDoors", Unit: "openenv-http-64-p50-ms"},
		{What: "OpenEnv HTTP at 64 sessions: step p99 (ms)", Num: "BenchmarkEnvDoors", Unit: "openenv-http-64-p99-ms"},
		{What: "OpenEnv WebSocket at 8 sessions: steps/s", Num: "BenchmarkEnvDoors", Unit: "openenv-ws-8-steps/s"},
		{What: "OpenEnv WebSocket at 64 sessions: steps/s", Num: "BenchmarkEnvDoors", Unit: "openenv-ws-64-steps/s"},
		{What: "OpenEnv WebSocket at 64 sessions: step p50 (ms)", Num: "BenchmarkEnvDoors", Unit: "openenv-ws-64-p50-ms"},
		{What: "OpenEnv WebSocket at 64 sessions: step p99 (ms)", Num: "BenchmarkEnvDoors", Unit: "openenv-ws-64-p99-ms"},
		{What: "MCP at 8 sessions: steps/s", Num: "BenchmarkEnvDoors", Unit: "mcp-8-steps/s"},
		{What: "MCP at 64 sessions: steps/s", Num: "BenchmarkEnvDoors", Unit: "mcp-64-steps/s"},
		{What: "MCP at 64 sessions: step p50 (ms)", Num: "BenchmarkEnvDoors", Unit: "mcp-64-p50-ms"},
		{What: "MCP at 64 sessions: step p99 (ms)", Num: "BenchmarkEnvDoors", Unit: "mcp-64-p99-ms"},
	}, Targets: []target{
		{ratio: ratio{"env server, trivial cell: >= 300 steps/s at 64 sessions", "BenchmarkEnvDoors", "", "v1-64-steps/s"}, Min: 300},
		{ratio: ratio{"env server, trivial cell: step p50 <= 10 ms at 64 sessions", "BenchmarkEnvDoors", "", "v1-64-p50-ms"}, Max: 10},
		{ratio: ratio{"env server, trivial cell: step p99 <= 50 ms at 64 sessions", "BenchmarkEnvDoors", "", "v1-64-p99-ms"}, Max: 50},
	}},
	{Name: "sandbox", Pkg: "./services/sandbox-worker/sandbox", Bench: "BenchmarkPandasGroupby", Benchtime: "20x", Ratios: []ratio{
		{"pandas action p50, cold bwrap / warm pool", "BenchmarkPandasGroupby/cold", "BenchmarkPandasGroupby/warm", "p50-ms"},
		{"pandas action p50 on an episode's second turn, docker / warm pool", "BenchmarkPandasGroupby/docker", "BenchmarkPandasGroupby/warm", "turn2-p50-ms"},
		{"pandas action p50 on an episode's first turn (docker: container start), docker / cold bwrap", "BenchmarkPandasGroupby/docker", "BenchmarkPandasGroupby/cold", "p50-ms"},
		{"pandas action p50 on an episode's first turn, docker starting its container / docker with a ready pool", "BenchmarkPandasGroupby/docker", "BenchmarkPandasGroupby/docker-pool", "p50-ms"},
	}, Show: []ratio{
		{What: "docker with a ready pool: first turn p50 (ms)", Num: "BenchmarkPandasGroupby/docker-pool", Unit: "p50-ms"},
		{What: "docker with a ready pool: episodes served by a pooled container", Num: "BenchmarkPandasGroupby/docker-pool", Unit: "pool-hits/op"},
		{What: "warm pool: pandas action p50 (ms)", Num: "BenchmarkPandasGroupby/warm", Unit: "p50-ms"},
		{What: "cold bwrap: pandas action p50 (ms)", Num: "BenchmarkPandasGroupby/cold", Unit: "p50-ms"},
		{What: "warm pool: episodes served by a ready server", Num: "BenchmarkPandasGroupby/warm", Unit: "pool-hits/op"},
	}, Targets: []target{
		{ratio: ratio{"warm pandas action p50 < 10 ms", "BenchmarkPandasGroupby/warm", "", "p50-ms"}, Max: 10},
		{ratio: ratio{"cold bwrap / warm pool p50 >= 50x", "BenchmarkPandasGroupby/cold", "BenchmarkPandasGroupby/warm", "p50-ms"}, Min: 50},
	}},
	{Name: "pipeline", Pkg: "./systemtest", Bench: "BenchmarkPipelineOverhead", Benchtime: "1x", Show: []ratio{
		{What: "warm pool, 1 episode in flight: overhead per turn, p50 (ms)", Num: pipeWarm1, Unit: "overhead-p50-ms"},
		{What: "warm pool, 4 episodes in flight: overhead per turn, p50 (ms)", Num: pipeWarm4, Unit: "overhead-p50-ms"},
		{What: "warm pool, 4 episodes in flight: overhead per turn, p95 (ms)", Num: pipeWarm4, Unit: "overhead-p95-ms"},
		{What: "cold bwrap, 4 episodes in flight: overhead per turn, p50 (ms)", Num: pipeCold4, Unit: "overhead-p50-ms"},
	}, Targets: []target{
		{ratio: ratio{"warm, 1 in flight: sandbox side p50 < 2 ms", pipeWarm1, "", "sandbox-p50-ms"}, Max: 2},
		{ratio: ratio{"warm, 1 in flight: return path p50 < 2 ms", pipeWarm1, "", "return-p50-ms"}, Max: 2},
		{ratio: ratio{"warm, 4 in flight: sandbox side p50 < 2 ms", pipeWarm4, "", "sandbox-p50-ms"}, Max: 2},
		{ratio: ratio{"warm, 4 in flight: return path p50 < 2 ms", pipeWarm4, "", "return-p50-ms"}, Max: 2},
	}},
	{Name: "scaling", Pkg: "./systemtest", Bench: "BenchmarkSandboxScaling", Benchtime: "1x", Ratios: []ratio{
		{"episodes/s, 2 sandbox-worker processes / 1", "BenchmarkSandboxScaling", "BenchmarkSandboxScaling", "episodes/s-2w|episodes/s-1w"},
		{"episodes/s, 4 sandbox-worker processes / 1", "BenchmarkSandboxScaling", "BenchmarkSandboxScaling", "episodes/s-4w|episodes/s-1w"},
	}},
	{Name: "concurrency", Pkg: "./systemtest", Bench: "BenchmarkConcurrentEpisodes", Benchtime: "1x", Show: []ratio{
		{What: "model requests in flight at once, of 1,000 episodes", Num: "BenchmarkConcurrentEpisodes", Unit: "peak-model-requests"},
		{What: "llm-worker peak RSS (MiB) with 1,000 episodes in flight", Num: "BenchmarkConcurrentEpisodes", Unit: "peak-MiB-llm-worker"},
		{What: "seconds over which the 1,000 model requests began (all in flight at once needs < 1)", Num: "BenchmarkConcurrentEpisodes", Unit: "admission-s"},
	}},
	{Name: "hosts", Pkg: "./systemtest", Bench: "BenchmarkScalingAcrossHosts", Benchtime: "1x", Ratios: []ratio{
		{"episodes/s, 2 llm-workers on their own hosts / 1 (1 s model, --concurrency 8)", hosts, hosts, "llm-episodes/s-2w|llm-episodes/s-1w"},
		{"episodes/s, 4 llm-workers / 1", hosts, hosts, "llm-episodes/s-4w|llm-episodes/s-1w"},
		{"episodes/s, 8 llm-workers / 1", hosts, hosts, "llm-episodes/s-8w|llm-episodes/s-1w"},
		{"episodes/s, 2 sandbox-workers on their own hosts / 1 (sandbox-bound, --concurrency 1)", hosts, hosts, "sandbox-episodes/s-2w|sandbox-episodes/s-1w"},
		{"episodes/s, 4 sandbox-workers / 1", hosts, hosts, "sandbox-episodes/s-4w|sandbox-episodes/s-1w"},
		{"episodes/s, 2 sandbox-workers / 1, CPU-bound (a cold pandas import per episode)", hosts, hosts, "pandas-episodes/s-2w|pandas-episodes/s-1w"},
		{"episodes/s, 4 sandbox-workers / 1, CPU-bound", hosts, hosts, "pandas-episodes/s-4w|pandas-episodes/s-1w"},
	}, Show: []ratio{
		{What: "cores busy, 8 llm-workers", Num: hosts, Unit: "llm-cores-8w"},
		{What: "cores busy, 4 sandbox-workers", Num: hosts, Unit: "sandbox-cores-4w"},
		{What: "cores busy, 4 sandbox-workers, CPU-bound", Num: hosts, Unit: "pandas-cores-4w"},
	}},
}

// The pipeline suite's sub-benchmarks.
const (
	pipeWarm1 = "BenchmarkPipelineOverhead/warm/inflight=1"
	pipeWarm4 = "BenchmarkPipelineOverhead/warm/inflight=4"
	pipeCold4 = "BenchmarkPipelineOverhead/cold/inflight=4"
	hosts     = "BenchmarkScalingAcrossHosts"
)

func main() {
	only := flag.String("suite", "", "comma-separated suites to run (default all: store, sandbox, pipeline, scaling, concurrency, hosts)")
	verbose := flag.Bool("v", false, "also print each suite's go test output")
	check := flag.Bool("check", false, "exit 1 when a figure misses its target (the targets are printed either way)")
	outPath := flag.String("out", "", "also write the figures to this Markdown file, headed by the machine, the date and the commit (docs cite these files, not prose)")
	flag.Parse()
	root, err := repoRoot()
	if err != nil {
		fatal(err)
	}
	out := io.Discard
	if *outPath != "" {
		f, err := os.Create(*outPath)
		if err != nil {
			fatal(fmt.Errorf("bench: results file: %w", err))
		}
		defer f.Close()
		if err := writeHeader(f, describeMachine(root), os.Args[1:]); err != nil {
			fatal(fmt.Errorf("bench: results file: %w", err))
		}
		out = f
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	failed := false
	for _, s := range suites {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), s.Name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s: go test -bench %s %s\n", s.Name, s.Bench, s.Pkg)
		raw, err := run(root, s)
		if *verbose || err != nil {
			os.Stderr.Write(raw)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.Name, err)
			failed = true
			continue
		}
		res := parse(bytes.NewReader(raw))
		figures := report(s, res)
		lines, missed := checkTargets(s, res)
		for _, line := range append(figures, lines...) {
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
		if err := writeLines(out, append(figures, lines...)); err != nil {
			fatal(fmt.Errorf("bench: results file: %w", err))
		}
		if *check && missed > 0 {
			fmt.Fprintf(os.Stderr, "bench: %s: %d target(s) missed\n", s.Name, missed)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func run(root string, s suite) ([]byte, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^"+s.Bench+"$", "-benchtime", s.Benchtime, "-timeout", "30m", s.Pkg)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("go test: %w", err)
	}
	return out, nil
}

// results maps a benchmark name (without the -GOMAXPROCS suffix) to its
// metrics by unit.
type results map[string]map[string]float64

// parse reads `go test -bench` output: "BenchmarkX/sub-2  N  v unit  v unit...".
func parse(r io.Reader) results {
	res := results{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		m := res[name]
		if m == nil {
			m = map[string]float64{}
			res[name] = m
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				m[f[i+1]] = v
			}
		}
	}
	return res
}

// report renders a suite's lines: "suite \t what \t ratio \t from".
// A ratio's Unit "a|b" divides unit a of Num by unit b of Den.
func report(s suite, res results) []string {
	var lines []string
	for _, r := range s.Ratios {
		nu, du := r.Unit, r.Unit
		if a, b, ok := strings.Cut(r.Unit, "|"); ok {
			nu, du = a, b
		}
		n, okn := res[r.Num][nu]
		d, okd := res[r.Den][du]
		switch {
		case !okn || !okd:
			lines = append(lines, fmt.Sprintf("%s\t%s\t-\t(not measured)\t", s.Name, r.What))
		case d == 0:
			lines = append(lines, fmt.Sprintf("%s\t%s\t-\t%.4g / 0\t", s.Name, r.What, n))
		default:
			lines = append(lines, fmt.Sprintf("%s\t%s\t%.2fx\t%.4g / %.4g %s\t", s.Name, r.What, n/d, n, d, nu))
		}
	}
	for _, r := range s.Show {
		if v, ok := res[r.Num][r.Unit]; ok {
			lines = append(lines, fmt.Sprintf("%s\t%s\t%.4g\t\t", s.Name, r.What, v))
		} else {
			lines = append(lines, fmt.Sprintf("%s\t%s\t-\t(not measured)\t", s.Name, r.What))
		}
	}
	return lines
}

// value is a ratio's figure: Num's Unit, divided by Den's when Den is set.
func (r ratio) value(res results) (v float64, shown string, ok bool) {
	nu, du := r.Unit, r.Unit
	if a, b, cut := strings.Cut(r.Unit, "|"); cut {
		nu, du = a, b
	}
	n, okn := res[r.Num][nu]
	if r.Den == "" {
		return n, fmt.Sprintf("%.4g %s", n, nu), okn
	}
	d, okd := res[r.Den][du]
	if !okn || !okd || d == 0 {
		return 0, "", false
	}
	return n / d, fmt.Sprintf("%.2fx (%.4g / %.4g %s)", n/d, n, d, nu), true
}

// checkTargets renders a suite's targets, "met" or "MISSED" or "not
// measured", and counts the missed ones (one not measured is not missed:
// a suite skips what this machine lacks).
func checkTargets(s suite, res results) (lines []string, missed int) {
	for _, t := range s.Targets {
		v, shown, ok := t.value(res)
		verdict := "met"
		switch {
		case !ok:
			verdict, shown = "not measured", "-"
		case t.Min != 0 && v < t.Min, t.Max != 0 && v >= t.Max:
			verdict = "MISSED"
			missed++
		}
		lines = append(lines, fmt.Sprintf("%s\ttarget: %s\t%s\t%s\t", s.Name, t.What, verdict, shown))
	}
	return lines, missed
}

// repoRoot is the directory holding go.work, above the working directory.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for ; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("bench: no go.work above the working directory")
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
