package systemtest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/miniotest"
)

// runCLI runs the medgym CLI in-process and returns its stdout, stderr and error.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	err := cli.Run(ctx, args, &out, &errb)
	return out.String(), errb.String(), err
}

// TestBadInputClearErrors: each bad input gives one clear error naming the
// thing and the fix, and no trajectory or manifest is written.
func TestBadInputClearErrors(t *testing.T) {
	data := dataRoot(t)
	// A closed port: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	// A malformed MedCalc-Bench file: a copy with a broken row.
	bad := t.TempDir()
	src, err := os.ReadFile(filepath.Join(data, "medcalcbench", "medcalc_bench_v1.0_test_dev.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(src), "\n", 2)
	if err := os.MkdirAll(filepath.Join(bad, "medcalcbench"), 0o755); err != nil {
		t.Fatal(err)
	}
	broken := lines[0] + "\n" + "1,not-a-number,Broken calculator\n"
	if err := os.WriteFile(filepath.Join(bad, "medcalcbench", "medcalc_bench_v1.0_test_dev.csv"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	// A model server whose API is under /v1, named without it.
	llm := httptest.NewServer(fakellm.New(fakellm.Config{Policy: "script", Script: []string{answerReply}, Seed: 1, Model: "m"}))
	defer llm.Close()
	cases := []struct {
		name string
		args []string
		want []string // all must appear in the error
	}{
		{"model URL without /v1", []string{"--policy", "openai", "--model", "m", "--llm-url", llm.URL}, []string{"404", "/v1", "--llm-url"}},
		{"missing dataset folder", []string{"--data", filepath.Join(t.TempDir(), "nowhere")}, []string{"medcalc", "--data"}},
		{"unknown dataset", []string{"--dataset", "no_such_set"}, []string{"no_such_set", "built-in"}},
		{"malformed row", []string{"--data", bad}, []string{"medcalc_bench_v1.0_test_dev.csv:2"}},
		{"unreachable model", []string{"--policy", "openai", "--model", "m", "--llm-url", "http://" + dead + "/v1"}, []string{dead, "--llm-url"}},
		{"refusing S3 endpoint", []string{"--store", "s3://bucket/p", "--s3-endpoint", dead, "--s3-insecure"}, []string{dead}},
		{"bad run id", []string{"--run-id", "has space"}, []string{"run_id"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := filepath.Join(t.TempDir(), "store")
			args := append([]string{"run", "--quiet", "--limit", "2", "--state", t.TempDir(), "--store", store, "--data", data}, c.args...)
			_, _, err := runCLI(t, args...)
			if err == nil {
				t.Fatal("want an error")
			}
			msg := err.Error()
			if strings.Count(msg, "\n") > 0 {
				t.Errorf("error spans several lines: %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if m, _ := filepath.Glob(filepath.Join(store, "trajectories", "*", "*")); len(m) > 0 {
				t.Errorf("a failed run left files: %v", m)
			}
		})
	}
}

// TestRunToMinIO runs episodes with the trajectory store on a real MinIO
// server, then reads them back through the S3 path and queries them.
func TestRunToMinIO(t *testing.T) {
	endpoint, access, secret, _, _ := miniotest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.Store, f.Verifier.StoreOptions.Endpoint, f.Verifier.StoreOptions.UseSSL = "s3://medgym-test/runs", endpoint, false
	f.Limit, f.RunID = 10, "e2e-s3"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcomes[schemas.OutcomeCorrect] != 10 {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
	out, _, err := runCLI(t, "query", "--store", "s3://medgym-test/runs", "--s3-endpoint", endpoint, "--s3-insecure", "--format", "csv",
		"SELECT count(*) AS n, sum(reward) AS r, count(DISTINCT episode_id) AS e FROM trajectories WHERE run_id = 'e2e-s3'")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "10,10") {
		t.Fatalf("query over the S3 store: %q, want 10 rows, reward 10, 10 episodes", out)
	}
}

// TestQueryCLIBounds: medgym query bounds what one query can take (rows,
// time, memory), says which flag to raise, and refuses bad flags.
func TestQueryCLIBounds(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	row := parquet.Row{RunID: "r1", EpisodeID: "e1", Dataset: "mimic_iii", Outcome: "correct", Reward: 1,
		SchemaVersion: parquet.SchemaVersion, StartedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := st.Write(t.Context(), []parquet.Row{row}); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "query", "--store", dir, "--max-rows", "3", "--format", "csv", "SELECT x FROM range(100) t(x)")
	if err == nil || !strings.Contains(err.Error(), "row limit") || out != "x\n0\n1\n2\n" {
		t.Errorf("over --max-rows: err %v, out %q", err, out)
	}
	_, _, err = runCLI(t, "query", "--store", dir, "--timeout", "300ms",
		"SELECT count(*) FROM range(1000000000000) a(x), range(1000) b(y) WHERE x % 7 = y")
	if err == nil || !strings.Contains(err.Error(), "--timeout") {
		t.Errorf("over --timeout: %v", err)
	}
	_, _, err = runCLI(t, "query", "--store", dir, "--memory-limit", "32MB", "SELECT len(list(x)) FROM range(30000000) t(x)")
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "memory") {
		t.Errorf("over --memory-limit: %v", err)
	}
	for _, bad := range [][]string{{"--format", "json"}, {"--threads", "0"}, {"--max-rows", "-1"}, {"--timeout", "-1s"}, {"--memory-limit", "1GB'"}} {
		args := append(append([]string{"query", "--store", dir}, bad...), "SELECT 1")
		if _, _, err := runCLI(t, args...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	out, _, err = runCLI(t, "query", "--store", dir, "SELECT episode_id, reward FROM trajectories")
	if err != nil || !strings.Contains(out, "e1") {
		t.Errorf("a plain query: %v, %q", err, out)
	}
}
