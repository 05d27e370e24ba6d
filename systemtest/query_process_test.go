package systemtest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/miniotest"
)

// TestQueryAsAProcess: medgym query, as a process of its own, confines
// itself to reading files (query.Confine) before its statement runs, the
// S3 store's temporary copy excepted. Over a directory store and over a
// MinIO store it still answers, removes the copy it made, and says
// nothing (on a kernel with Landlock; without, only that it cannot
// confine itself). store/query's TestQueryConfinedCannotWrite shows a
// write refused.
func TestQueryAsAProcess(t *testing.T) {
	endpoint, access, secret, _, _ := miniotest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	row := parquet.Row{RunID: "r1", EpisodeID: "e1", Dataset: "mimic_iii", Outcome: "correct", Reward: 1,
		SchemaVersion: parquet.SchemaVersion, StartedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	for _, url := range []string{dir, "s3://medgym-query/runs"} {
		st, err := store.Open(t.Context(), url, store.Options{Endpoint: endpoint})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(t.Context(), []parquet.Row{row}); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"--store", dir},
		{"--store", "s3://medgym-query/runs", "--s3-endpoint", endpoint, "--s3-insecure"},
	} {
		tmp := t.TempDir()
		cmd := exec.CommandContext(t.Context(), os.Args[0], append(append([]string{"query", "--format", "csv"}, args...),
			"SELECT count(*) AS n, sum(reward) AS r FROM trajectories")...)
		cmd.Env = append(os.Environ(), medgymChild+"=1", "TMPDIR="+tmp)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stdout.String() != "n,r\n1,1\n" {
			t.Fatalf("medgym query %v: %v, %q\n%s", args, err, stdout.String(), stderr.String())
		}
		switch msg := stderr.String(); {
		case strings.Contains(msg, "no Landlock"):
			t.Logf("this kernel cannot confine the query: %s", msg) // the warning a kernel without Landlock gives
		case msg != "":
			t.Errorf("medgym query %v said:\n%s", args, msg)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("medgym query %v left %v in its temporary directory", args, left)
		}
	}
}
