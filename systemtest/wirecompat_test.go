package systemtest

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
)

// TestOldRunSpecProcessed (issue 17, rolling upgrades): the run spec a
// client of the previous release (schema 1.1) published, taken byte for
// byte from schemas/testdata/wire-v1.1 (only its model endpoint pointed at
// the test's fake model), is run by the current services to the end: every
// episode is stored once with an outcome.
func TestOldRunSpecProcessed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "schemas", "testdata", "wire-v1.1", "run_spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	llm := httptest.NewServer(fakellm.New(fakellm.Config{Script: []string{actionJSON("answer", "answer", "42")}, Model: "Qwen/Qwen2.5-7B-Instruct"}))
	defer llm.Close()
	old := strings.Replace(string(raw), "http://vllm:8000/v1", llm.URL+"/v1", 1)
	if old == string(raw) || !strings.Contains(old, `"run_id":"v11run"`) {
		t.Fatal("the golden run spec changed: update this test")
	}
	t.Setenv("OPENAI_API_KEY", "test")
	f := baseFlags(t)
	url, _ := startCluster(t, ctx, f.ServiceFlags, 0)
	conn, err := bus.Connect(ctx, url, "old-client", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.PublishRaw(ctx, schemas.RunSubmitted.For("v11run"), []byte(old)); err != nil {
		t.Fatal(err)
	}
	const episodes = 4 // limit 2 × samples 2
	for done(ctx, conn, "v11run") < episodes {
		if ctx.Err() != nil {
			t.Fatalf("the old run spec was not run: %d of %d episodes scored", done(context.Background(), conn, "v11run"), episodes)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var rows int
	for rows < episodes && ctx.Err() == nil {
		rows = len(readRun(t, ctx, f.Store, "v11run"))
		time.Sleep(100 * time.Millisecond)
	}
	for _, r := range readRun(t, ctx, f.Store, "v11run") {
		if !schemas.Outcome(r.Outcome).Valid() || r.Outcome == string(schemas.OutcomeInfraFailure) {
			t.Errorf("episode %s: outcome %q (%s)", r.EpisodeID, r.Outcome, r.Error)
		}
	}
	if rows != episodes {
		t.Fatalf("%d rows stored, want %d", rows, episodes)
	}
}
