package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// envDoor plays one session of the benchmark's task through one of the
// environment server's doors: open, then steps of trivial code.
type envDoor interface {
	open(ctx context.Context) error
	step(ctx context.Context, turn int, content string) error
	close()
}

// BenchmarkEnvDoors measures the environment server's steps through each
// door side by side in one run: medgym's /v1/sessions, OpenEnv over HTTP,
// OpenEnv over its WebSocket and MCP, at 8 and 64 sessions at once. Every
// session runs envBenchSteps code steps of a trivial cell (`print(i)`, a
// different cell each turn so the loop guard lets each run) in the real
// bubblewrap sandbox, on an embedded env serve. It reports, per door and
// concurrency, steps/s and the step latency's p50 and p99 in ms.
func BenchmarkEnvDoors(b *testing.B) {
	needSandbox(b)
	lib := canaryLibrary(b, "MEDGYM-BENCH-CANARY")
	p := startEnv(b, lib, b.TempDir(), "--max-sessions", "256")
	doors := map[string]func() envDoor{
		"v1":           func() envDoor { return &v1Door{base: p.url} },
		"openenv-http": func() envDoor { return &openenvHTTPDoor{base: p.url} },
		"openenv-ws":   func() envDoor { return &openenvWSDoor{base: p.url} },
		"mcp":          func() envDoor { return &mcpDoor{base: p.url} },
	}
	const envBenchSteps = 8
	for b.Loop() {
		for _, conc := range []int{8, 64} {
			for _, name := range []string{"v1", "openenv-http", "openenv-ws", "mcp"} {
				lat, el, err := runEnvDoor(doors[name], conc, envBenchSteps)
				if err != nil {
					b.Fatalf("%s at %d sessions: %v", name, conc, err)
				}
				slices.Sort(lat)
				q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))]) / float64(time.Millisecond) }
				b.ReportMetric(float64(len(lat))/el.Seconds(), fmt.Sprintf("%s-%d-steps/s", name, conc))
				b.ReportMetric(q(0.5), fmt.Sprintf("%s-%d-p50-ms", name, conc))
				b.ReportMetric(q(0.99), fmt.Sprintf("%s-%d-p99-ms", name, conc))
			}
		}
	}
}

// runEnvDoor plays conc sessions at once through a door, steps code steps
// each, and returns every step's latency and the wall time of the steps.
func runEnvDoor(door func() envDoor, conc, steps int) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sessions := make([]envDoor, conc)
	for i := range sessions {
		sessions[i] = door()
		if err := sessions[i].open(ctx); err != nil {
			return nil, 0, fmt.Errorf("open: %w", err)
		}
	}
	defer func() {
		for _, s := range sessions {
			s.close()
		}
	}()
	var mu sync.Mutex
	var lat []time.Duration
	errs := make(chan error, conc)
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Go(func() {
			for turn := range steps {
				content := fmt.Sprintf(`{"action":"validate_code","params":{"code":"print(%d)"}}`, turn)
				t0 := time.Now()
				if err := s.step(ctx, turn, content); err != nil {
					errs <- fmt.Errorf("turn %d: %w", turn, err)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, err
	}
	return lat, el, nil
}

var envBenchHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// postJSON posts body and decodes a 2xx answer into out.
func postJSON(ctx context.Context, url string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := envBenchHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

var benchOptions = map[string]any{"max_turns": 200}

type v1Door struct{ base, id string }

func (d *v1Door) open(ctx context.Context) error {
	var out struct {
		SessionID string `json:"session_id"`
	}
	err := postJSON(ctx, d.base+"/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": benchOptions}, &out)
	d.id = out.SessionID
	return err
}

func (d *v1Door) step(ctx context.Context, turn int, content string) error {
	return postJSON(ctx, d.base+"/v1/sessions/"+d.id+"/step", map[string]any{"turn": turn, "content": content}, nil)
}

func (d *v1Door) close() {
	req, err := http.NewRequest(http.MethodDelete, d.base+"/v1/sessions/"+d.id, nil)
	if err == nil {
		if resp, err := envBenchHTTP.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
}

type openenvHTTPDoor struct{ base, id string }

func (d *openenvHTTPDoor) open(ctx context.Context) error {
	var out struct {
		Observation struct {
			SessionID string `json:"session_id"`
		} `json:"observation"`
	}
	err := postJSON(ctx, d.base+"/openenv/reset", map[string]any{"task_id": "eicu-canary-0", "options": benchOptions}, &out)
	d.id = out.Observation.SessionID
	if err == nil && d.id == "" {
		err = fmt.Errorf("reset answered no session id")
	}
	return err
}

func (d *openenvHTTPDoor) step(ctx context.Context, turn int, content string) error {
	return postJSON(ctx, d.base+"/openenv/step", map[string]any{"session_id": d.id, "turn": turn, "action": map[string]any{"content": content}}, nil)
}

func (d *openenvHTTPDoor) close() { (&v1Door{base: d.base, id: d.id}).close() }

type openenvWSDoor struct {
	base string
	ws   *websocket.Conn
}

func (d *openenvWSDoor) send(ctx context.Context, msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if err := d.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return err
	}
	_, raw, err := d.ws.Read(ctx)
	if err != nil {
		return err
	}
	var r struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	if r.Type != "observation" {
		return fmt.Errorf("answer %s", raw)
	}
	return nil
}

func (d *openenvWSDoor) open(ctx context.Context) error {
	ws, _, err := websocket.Dial(ctx, strings.Replace(d.base, "http://", "ws://", 1)+"/openenv/ws", nil)
	if err != nil {
		return err
	}
	d.ws = ws
	return d.send(ctx, map[string]any{"type": "reset", "data": map[string]any{"task_id": "eicu-canary-0", "options": benchOptions}})
}

func (d *openenvWSDoor) step(ctx context.Context, _ int, content string) error {
	return d.send(ctx, map[string]any{"type": "step", "data": map[string]any{"content": content}})
}

func (d *openenvWSDoor) close() {
	if d.ws != nil {
		_ = d.ws.Close(websocket.StatusNormalClosure, "")
	}
}

// mcpDoor steps a session through the MCP door with the official Go SDK's
// client: each step a validate_code tool call.
type mcpDoor struct {
	base, id string
	cs       *mcp.ClientSession
}

func (d *mcpDoor) open(ctx context.Context) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "medgym-bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.base + "/mcp?task_id=eicu-canary-0&max_turns=200",
		HTTPClient: envBenchHTTP}, nil)
	d.cs = cs
	return err
}

func (d *mcpDoor) step(ctx context.Context, turn int, _ string) error {
	res, err := d.cs.CallTool(ctx, &mcp.CallToolParams{Name: "validate_code", Arguments: map[string]any{"code": fmt.Sprintf("print(%d)", turn)}})
	if err == nil && res.IsError {
		err = fmt.Errorf("tool error: %+v", res.Content)
	}
	if err == nil && d.id == "" {
		sc, _ := res.StructuredContent.(map[string]any)
		d.id, _ = sc["session_id"].(string)
	}
	return err
}

func (d *mcpDoor) close() {
	if d.cs != nil {
		_ = d.cs.Close()
	}
	if d.id != "" { // end the episode, as the other doors do
		(&v1Door{base: d.base, id: d.id}).close()
	}
}
