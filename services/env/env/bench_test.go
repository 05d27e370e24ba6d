package env

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/internal/catalog"
	"github.com/medgym/medgym/services/env/internal/session"
)

// benchEnv is the server on an embedded JetStream with a stand-in for the
// verifier (it scores every finished episode incorrect at once), so the
// figures are the server's own: HTTP, JSON, the engine, the key-value
// round trips and the bus, not the sandbox or the scoring rules.
type benchEnv struct {
	url  string
	conn *bus.Conn
	svc  *session.Service
}

// startBench starts the server (tweak adjusts its Config); the door tests
// use it too.
func startBench(b testing.TB, maxSessions int, tweak ...func(*Config)) *benchEnv {
	b.Helper()
	url := bustest.StartJetStream(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	conn, err := bus.Connect(ctx, url, "bench", log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		b.Fatal(err)
	}
	views := filepath.Join(b.TempDir(), "views")
	var vs []schemas.TaskView
	for i := range 8 {
		vs = append(vs, schemas.TaskView{ID: fmt.Sprintf("npowerai-b-%d", i), Dataset: "npowerai", Split: "test",
			Question: "What is 6 times 7?", AnswerType: schemas.AnswerNumber, PermittedActions: []string{"validate_code", "answer"}})
	}
	if err := catalog.Write(views, "npowerai", "test", vs); err != nil {
		b.Fatal(err)
	}
	// The verifier's stand-in.
	rt, err := bus.NewRouter(conn, log)
	if err != nil {
		b.Fatal(err)
	}
	if err := bus.Handle(rt, "fake-verifier", bus.HandlerOptions{Concurrency: 64, ConsumerOptions: bus.ConsumerOptions{
		Stream: schemas.StreamResults, Durable: "bench-verifier", Subject: schemas.EpisodeCompleted}},
		func(ctx context.Context, r schemas.EpisodeResult) error {
			return conn.Publish(ctx, schemas.EpisodeScored.For(r.Request.RunID), "score/"+r.Request.EpisodeID, schemas.Score{
				RunID: r.Request.RunID, EpisodeID: r.Request.EpisodeID, TaskID: r.Request.Task.ID, Dataset: r.Request.Task.Dataset,
				Outcome: schemas.OutcomeIncorrect, NumTurns: len(r.Turns), VerifierVersion: "bench", ScoredAt: time.Now().UTC()})
		}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = rt.Run(ctx) }()
	ready := make(chan string, 1)
	cfg := Config{Addr: "127.0.0.1:0", Views: views, MaxSessions: maxSessions, Idle: time.Hour, Run: "bench",
		Concurrency: 64, Ready: func(a string) { ready <- a }}
	for _, f := range tweak {
		f(&cfg)
	}
	env := &benchEnv{conn: conn}
	go func() {
		if err := Run(ctx, conn, cfg, log); err != nil && ctx.Err() == nil {
			panic(err)
		}
	}()
	env.url = "http://" + <-ready
	// The same service, in-process, for the overhead comparison.
	st, err := openStore(ctx, conn)
	if err != nil {
		b.Fatal(err)
	}
	cat, err := catalog.Open(views)
	if err != nil {
		b.Fatal(err)
	}
	runs, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		b.Fatal(err)
	}
	env.svc = session.New(session.Deps{Store: st, Catalog: cat, Publish: conn.Publish, Register: registerRun(runs, nil), DefaultRun: "bench-inproc"},
		session.Limits{StepWait: time.Minute})
	return env
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}, Timeout: time.Minute}

func post(b *testing.B, url string, body any) map[string]any {
	j, _ := json.Marshal(body)
	resp, err := client.Post(url, "application/json", bytes.NewReader(j))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		b.Fatalf("POST %s: %d %s", url, resp.StatusCode, data)
	}
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return out
}

func quantiles(d []time.Duration) (p50, p95 time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*95/100]
}

// BenchmarkStepOverhead: one step that executes nothing (a reply that does
// not parse: the engine, the key-value round trip, the answer) over HTTP,
// over an OpenEnv WebSocket, as an MCP tool call (a call whose parameters
// do not parse), and the same step called in-process; reports p50/p95 of
// each.
func BenchmarkStepOverhead(b *testing.B) {
	env := startBench(b, 0)
	create := map[string]any{"task_id": "npowerai-b-0", "options": map[string]any{"max_turns": 200, "loop_guard": "off"}}
	for _, mode := range []string{"http", "openenv-ws", "mcp", "in-process"} {
		b.Run(mode, func(b *testing.B) {
			var lat []time.Duration
			var id string
			turn := 0
			var door stepper
			fresh := func() {
				switch mode {
				case "openenv-ws":
					door = openenvStepper(b, env.url, create)
				case "mcp":
					door = mcpStepper(b, env.url+"/mcp?task_id=npowerai-b-0&max_turns=200&loop_guard=off")
				case "http":
					id = post(b, env.url+"/v1/sessions", create)["session_id"].(string)
				default:
					m := 200
					c, err := env.svc.Create(context.Background(), session.CreateRequest{TaskID: "npowerai-b-0", Options: session.Options{MaxTurns: &m}})
					if err != nil {
						b.Fatal(err)
					}
					id = c.Session.ID
				}
				turn = 0
			}
			fresh()
			for b.Loop() {
				if turn == 199 {
					b.StopTimer()
					fresh()
					b.StartTimer()
				}
				t0 := time.Now()
				switch mode {
				case "http":
					post(b, env.url+"/v1/sessions/"+id+"/step", map[string]any{"turn": turn, "content": "thinking, no action yet"})
				case "openenv-ws", "mcp":
					door(turn)
				default:
					if _, err := env.svc.Step(context.Background(), id, session.StepRequest{Turn: turn, Content: "thinking, no action yet"}); err != nil {
						b.Fatal(err)
					}
				}
				lat = append(lat, time.Since(t0))
				turn++
			}
			p50, p95 := quantiles(lat)
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p95.Microseconds()), "p95-µs")
			fmt.Fprintf(os.Stderr, "step overhead %-10s p50 %v p95 %v (%d steps)\n", mode, p50, p95, len(lat))
		})
	}
}

// stepper plays one step that executes nothing at turn through a door.
type stepper func(turn int)

// openenvStepper opens a session over an OpenEnv WebSocket (closed with
// the benchmark) and steps it.
func openenvStepper(b *testing.B, base string, create map[string]any) stepper {
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/openenv/ws", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.CloseNow() })
	send := func(msg any) {
		j, _ := json.Marshal(msg)
		if err := ws.Write(ctx, websocket.MessageText, j); err != nil {
			b.Fatal(err)
		}
		if _, data, err := ws.Read(ctx); err != nil || !bytes.Contains(data, []byte(`"type":"observation"`)) {
			b.Fatalf("openenv: %s %v", data, err)
		}
	}
	send(map[string]any{"type": "reset", "data": create})
	return func(turn int) {
		send(map[string]any{"type": "step", "data": map[string]any{"turn": turn, "content": "thinking, no action yet"}})
	}
}

// mcpStepper opens an MCP session of endpoint and calls a tool with
// parameters that do not parse (the session opens with the first call).
func mcpStepper(b *testing.B, endpoint string) stepper {
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client, DisableStandaloneSSE: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return func(int) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "validate_code", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			b.Fatalf("mcp: %v %+v", err, res)
		}
	}
}

// BenchmarkSessions: clients at once, each playing whole sessions (create,
// a reply that does not parse, an answer scored by the verifier's
// stand-in); reports sessions per second and the process's peak heap.
// Before the clients start, 256 sessions are opened and left live: a live
// session that is not executing holds a key-value entry, no interpreter.
func BenchmarkSessions(b *testing.B) {
	env := startBench(b, 4096)
	for i := range 256 {
		post(b, env.url+"/v1/sessions", map[string]any{"task_id": fmt.Sprintf("npowerai-b-%d", i%8), "options": map[string]any{"run_id": "idle"}})
	}
	for _, clients := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			var peak atomic.Uint64
			stop := make(chan struct{})
			var sampler sync.WaitGroup
			sampler.Go(func() {
				var ms runtime.MemStats
				for {
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peak.Load() {
						peak.Store(ms.HeapInuse)
					}
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			})
			n := max(b.N, clients)
			var next atomic.Int64
			start := time.Now()
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for next.Add(1) <= int64(n) {
						s := post(b, env.url+"/v1/sessions", map[string]any{"task_id": "npowerai-b-1"})
						path := env.url + "/v1/sessions/" + s["session_id"].(string) + "/step"
						post(b, path, map[string]any{"turn": 0, "content": "hmm"})
						r := post(b, path, map[string]any{"turn": 1, "content": `{"action": "answer", "params": {"answer": 41}}`})
						if r["done"] != true {
							b.Errorf("session not done: %v", r)
						}
					}
				})
			}
			wg.Wait()
			el := time.Since(start)
			close(stop)
			sampler.Wait()
			rate := float64(n) / el.Seconds()
			b.ReportMetric(rate, "sessions/s")
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
			rss := peakRSS(b)
			b.ReportMetric(rss, "peak-rss-MiB")
			fmt.Fprintf(os.Stderr, "sessions: %3d clients  %7.1f sessions/s  peak heap %.1f MiB, process peak RSS %.1f MiB (%d sessions, 256 more idle)\n",
				clients, rate, float64(peak.Load())/(1<<20), rss, n)
		})
	}
}

// peakRSS is the process's peak resident set so far (VmHWM of
// /proc/self/status, MiB): the server, its embedded NATS server and the
// clients together, since the benchmark began.
func peakRSS(b *testing.B) float64 {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(st)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}
