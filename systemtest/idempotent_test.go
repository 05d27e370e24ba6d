package systemtest

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
)

// TestResubmitSameRunIsIdempotent submits one run id twice (the second time
// after the first finished, on the same JetStream state and store): the
// second submission changes nothing and every episode is stored once.
func TestResubmitSameRunIsIdempotent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.Limit, f.Samples, f.RunID, f.MaxInFlight = 4, 2, "twice", 3
	f.Temperatures = "0,0.6"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	first, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	second, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if first.Total != 8 || second.Total != 8 {
		t.Fatalf("totals %d and %d, want 8", first.Total, second.Total)
	}
	rows := readRun(t, ctx, f.Store, "twice")
	if len(rows) != 8 {
		t.Fatalf("%d rows after resubmission, want 8", len(rows))
	}
	files, _ := filepath.Glob(filepath.Join(f.Store, "trajectories", "run=twice", "*", "*.parquet"))
	n := 0
	for _, p := range files {
		n += countRows(t, p)
	}
	if n != 8 {
		t.Fatalf("%d rows across files, want 8", n)
	}
	// The temperature schedule reached the rows: sample 0 at 0, sample 1 at 0.6.
	for _, r := range rows {
		want := 0.0
		if r.SampleIndex == 1 {
			want = 0.6
		}
		if r.Temperature == nil || *r.Temperature != want {
			t.Fatalf("episode %s sample %d temperature %v, want %v", r.EpisodeID, r.SampleIndex, r.Temperature, want)
		}
	}
	// The manifest counts the run.
	b, err := os.ReadFile(filepath.Join(f.Store, "trajectories", "run=twice", "_manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Total  int                       `json:"total"`
		Counts map[string]map[string]int `json:"counts"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Total != 8 || m.Counts["medcalcbench"]["correct"] != 8 {
		t.Fatalf("manifest %s (%v)", b, err)
	}
}

// TestSandboxExecCLI: `medgym sandbox exec` runs code from stdin and prints
// the observation as JSON.
func TestSandboxExecCLI(t *testing.T) {
	// The sandbox runs as uid 65534: the data dir and its parents must be
	// reachable by others, which t.TempDir (0700 parent) is not.
	// `--data DIR` makes DIR's parent the sandbox's data root, which the
	// worker checks for verifier-only files: give DIR a parent of its own
	// rather than /tmp, where other tests' task files may lie.
	parent, err := os.MkdirTemp("", "medgym-exec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	data := filepath.Join(parent, "exec")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "vitals.csv"), []byte("id,hr\n1,80\n2,100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		code, status string
		check        func(r schemas.ExecResult) bool
	}{
		{"import pandas as pd\nanswer = pd.read_csv('/data/" + filepath.Base(data) + "/vitals.csv').hr.mean()\n", "ok",
			func(r schemas.ExecResult) bool { return strings.TrimSpace(r.Stdout) == "90.0" }},
		{"import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n", "error",
			func(r schemas.ExecResult) bool { return r.ExitCode != 0 && strings.Contains(r.Stderr, "Error") }},
		{"while True: pass\n", "timeout", func(r schemas.ExecResult) bool { return r.DurationMS >= 1000 }},
	}
	for _, c := range cases {
		stdin, err := os.CreateTemp(t.TempDir(), "code")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stdin.WriteString(c.code); err != nil {
			t.Fatal(err)
		}
		if _, err := stdin.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		old := os.Stdin
		os.Stdin = stdin
		out, _, err := runCLI(t, "sandbox", "exec", "--data", data, "--timeout", "2")
		os.Stdin = old
		if err != nil {
			t.Fatal(err)
		}
		var r schemas.ExecResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		if r.Status != c.status || !c.check(r) {
			t.Errorf("code %q: %+v, want status %s", c.code, r, c.status)
		}
	}
}
