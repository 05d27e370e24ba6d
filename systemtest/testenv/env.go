package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/dispatcher/dispatcher"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/services/llm-worker/llmworker"
	"github.com/medgym/medgym/services/sandbox-worker/sandboxworker"
	"github.com/medgym/medgym/services/verifier/verifier"
	"github.com/medgym/medgym/tasks"
)

// BaseModel is the name the fake model serves before any adapter is loaded.
const BaseModel = "fake-base"

// Env is a running pipeline.
type Env struct {
	NATSURL  string
	Conn     *bus.Conn
	Store    string // trajectory store directory
	DataRoot string
	Library  string
	Tasks    []tasks.Task    // the MedCalc tasks the fake model knows
	Model    *fakellm.Server // the fake model, alternate policy
	ModelURL string          // base URL, ending in /v1

	mu   sync.Mutex
	sent [][]schemas.ChatMessage
}

// Sent returns the message lists of every chat request the fake model
// received, in arrival order: exactly what the llm-worker sent the model.
func (e *Env) Sent() [][]schemas.ChatMessage {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.sent)
}

// capture records the messages of each chat completion request before
// the fake model serves it.
func (e *Env) capture(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			body, err := io.ReadAll(r.Body)
			if err == nil {
				var req struct {
					Messages []schemas.ChatMessage `json:"messages"`
				}
				if json.Unmarshal(body, &req) == nil {
					e.mu.Lock()
					e.sent = append(e.sent, req.Messages)
					e.mu.Unlock()
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

// DataRoot is the shared data (tasks.DataRoot).
func DataRoot(t testing.TB) string {
	t.Helper()
	return tasks.DataRoot()
}

// configure builds a service's Config from flags, as its main does.
func configure[C any, P interface {
	*C
	bus.Component
}](t testing.TB, args ...string) C {
	t.Helper()
	var c C
	fs := flag.NewFlagSet("testenv", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	P(&c).RegisterFlags(fs, func(string) string { return "" })
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := P(&c).Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// Start starts the pipeline with nTasks MedCalc test tasks; everything
// stops when the test ends.
func Start(t testing.TB, nTasks int) *Env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	data := DataRoot(t)
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: data})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) < nTasks {
		t.Fatalf("only %d medcalcbench tasks", len(ts))
	}
	ts = ts[:nTasks]
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(t.TempDir(), "js")})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("MEDGYM_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	conn, err := bus.Connect(ctx, ns.ClientURL(), "trainer-test", log)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	// MedCalc tasks need no data files, but the sandbox (uid 65534) must be
	// able to reach the library: t.TempDir's 0700 parent would not do.
	library, err := os.MkdirTemp("", "medgym-trainer-library-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(library) })
	if err := os.Chmod(library, 0o755); err != nil {
		t.Fatal(err)
	}
	model := fakellm.New(fakellm.Config{Policy: fakellm.PolicyAlternate, Model: BaseModel, References: fakellm.References(ts)})
	e := &Env{NATSURL: ns.ClientURL(), Conn: conn, Store: filepath.Join(t.TempDir(), "store"), DataRoot: data,
		Library: library, Tasks: ts, Model: model}
	srv := httptest.NewServer(e.capture(model))
	e.ModelURL = srv.URL + "/v1"
	var wg sync.WaitGroup
	run := func(name string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	shared := []string{"--data", data, "--library", e.Library}
	dc := configure[dispatcher.Config](t, shared...)
	lc := configure[llmworker.Config](t, append(shared, "--concurrency=32", "--name=test/llm-worker", "--llm-url", e.ModelURL,
		"--llm-timeout=30s", "--llm-retries=2")...)
	sc := configure[sandboxworker.Config](t, "--backend=bwrap", "--agent-tree", e.Library, "--memory-mb=1024",
		"--docker-ready=0", "--concurrency=2", "--name=test/sandbox-worker")
	vc := configure[verifier.Config](t, append(shared, "--store", e.Store, "--concurrency=16", "--batch-age=200ms")...)
	run("dispatcher", func() error { return dispatcher.Run(ctx, conn, dc, log) })
	run("llm-worker", func() error { return llmworker.Run(ctx, conn, lc, log) })
	run("sandbox-worker", func() error { return sandboxworker.Run(ctx, conn, sc, log) })
	run("verifier", func() error { return verifier.Run(ctx, conn, vc, log) })
	t.Cleanup(func() {
		if os.Getenv("MEDGYM_TEST_LOG") != "" {
			t.Logf("fake model requests: %+v", model.Stats())
		}
		cancel()
		wg.Wait()
		srv.Close()
		conn.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return e
}

// TaskIDs returns the ids of the env's tasks.
func (e *Env) TaskIDs() []string {
	ids := make([]string, len(e.Tasks))
	for i, t := range e.Tasks {
		ids[i] = t.View.ID
	}
	return ids
}

// Spec returns a RunSpec over the given tasks with K samples. A fake-model
// policy should carry Seed 0: by the seeds the dispatcher derives from it,
// the alternate policy gives each task of K = 4 3 successes (one after a
// crash) and 1 failure.
func (e *Env) Spec(runID string, k int, pol schemas.PolicySpec, taskIDs []string) schemas.RunSpec {
	opts := schemas.DefaultOptions()
	opts.MaxTurns, opts.EndOn, opts.ActionTimeoutSec = 2, schemas.EndOnAccepted, 30
	return schemas.RunSpec{RunID: runID, Datasets: []string{"medcalcbench"}, Split: "test", TaskIDs: taskIDs,
		Samples: k, Policy: pol, Options: opts, MaxInFlight: 16, SubmittedAt: time.Now().UTC()}
}

// Run submits spec and waits until every episode is scored; it returns the
// scores.
func (e *Env) Run(t testing.TB, ctx context.Context, spec schemas.RunSpec) []schemas.Score {
	t.Helper()
	if err := bus.SubmitRun(ctx, e.Conn, spec); err != nil {
		t.Fatal(err)
	}
	want := len(spec.TaskIDs) * spec.Samples
	seen := map[string]schemas.Score{}
	for p, err := range bus.FollowRun(ctx, e.Conn, spec.RunID, 100*time.Millisecond) {
		if err != nil {
			t.Fatalf("run %s: %d/%d scores: %v", spec.RunID, len(seen), want, err)
		}
		for _, sc := range p.Scores {
			seen[sc.EpisodeID] = sc
		}
		if len(seen) >= want {
			break
		}
	}
	out := make([]schemas.Score, 0, len(seen))
	for _, s := range seen {
		out = append(out, s)
	}
	return out
}
