package systemtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/miniotest"
)

// syncBuffer is a bytes.Buffer safe for the services' concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMinIOOutageMidRun: stop the MinIO server for 30 s in the middle of a
// run and start it again; the run completes with every episode stored
// exactly once, counted over every file (not through ReadRun's dedupe),
// and the verifier logged that the store was unreachable.
func TestMinIOOutageMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps MinIO down for a real 30 s")
	}
	const (
		episodes  = 40
		stopAfter = 10
		outage    = 30 * time.Second
	)
	endpoint, access, secret, stop, restart := miniotest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.Store, f.Verifier.StoreOptions.Endpoint, f.Verifier.StoreOptions.UseSSL = "s3://medgym-outage/runs", endpoint, false
	f.Limit, f.RunID, f.MaxInFlight, f.LogLevel = episodes, "outage", 2, "warn"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	type result struct {
		res cli.RunResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := cli.RunSpec(ctx, spec, f, logs)
		done <- result{res, err}
	}()

	// Wait until stopAfter episodes are stored, then take the store away.
	st, err := store.Open(ctx, f.Store, f.StoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	for {
		rows, err := st.ReadRun(ctx, "outage")
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) >= stopAfter {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("run ended before the outage: %+v %v\n%s", r.res, r.err, logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	t.Logf("MinIO stopped after %d+ episodes stored", stopAfter)
	select {
	case r := <-done:
		t.Fatalf("run ended while the store was down: %+v %v\n%s", r.res, r.err, logs.String())
	case <-time.After(outage):
	}
	restart()
	t.Log("MinIO restarted")

	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatalf("run did not finish after the store came back\n%s", logs.String())
	}
	if r.err != nil {
		t.Fatalf("run: %v\n%s", r.err, logs.String())
	}
	if r.res.Total != episodes || r.res.Outcomes[schemas.OutcomeCorrect] != episodes {
		t.Fatalf("outcomes %v of %d episodes, want %d correct", r.res.Outcomes, r.res.Total, episodes)
	}
	var storeDown []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "service=verifier") && strings.Contains(l, "unreachable") && strings.Contains(l, endpoint) {
			storeDown = append(storeDown, l)
		}
	}
	if len(storeDown) == 0 {
		t.Fatalf("the verifier did not log that the store at %s was unreachable:\n%s", endpoint, logs.String())
	}
	t.Logf("verifier: %s", storeDown[0])

	// Count rows over every file of the run.
	dir := t.TempDir()
	if err := st.CopyLocal(ctx, "outage", dir); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "trajectories", "run=outage", "dataset=*", "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	total := 0
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := parquet.Read(ctx, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, row := range rows {
			count[row.EpisodeID]++
			total++
		}
	}
	for id, n := range count {
		if n != 1 {
			t.Errorf("episode %s stored %d times", id, n)
		}
	}
	if len(count) != episodes || total != episodes {
		t.Fatalf("%d rows of %d episodes in %d files, want %d episodes stored once", total, len(count), len(files), episodes)
	}
	if _, err := st.ReadManifest(ctx, "outage"); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	t.Logf("%d episodes in %d files; %d store errors logged by the verifier", episodes, len(files), len(storeDown))
}
