package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/tasks"
)

// parityDoor plays the reference policy's two replies (the reference
// solution as validate_code, then its last printed line as the answer)
// through one door of a running env server and returns the session id,
// the reward the door answered at done and whether it said done.
type parityDoor func(ctx context.Context, base, taskID string, reply func(obs string) string) (session string, reward float64, done bool, err error)

// TestRewardParityAcrossDoors plays the reference solution of one test task
// of every dataset through `medgym run` and through the environment
// server's doors (/v1/sessions, OpenEnv over HTTP, OpenEnv's WebSocket,
// MCP through the official Go SDK's client),
// prints the door × dataset matrix, and fails on any disagreement of
// reward or outcome with `medgym run`'s stored row. It plays one task per
// dataset; MEDGYM_PARITY_TASKS=N plays the first N tasks of every category
// of every dataset instead (`make test-parity`, outside make test).
func TestRewardParityAcrossDoors(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	f := defaultFlags(t)
	per, stratified := 1, false
	if v := os.Getenv("MEDGYM_PARITY_TASKS"); v != "" {
		if _, err := fmt.Sscan(v, &per); err != nil || per < 1 {
			t.Fatalf("MEDGYM_PARITY_TASKS=%q", v)
		}
		stratified = true
	}
	var datasets, ids []string
	refs := map[string]string{}
	for _, ds := range tasks.Datasets() {
		ts, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: "test", DataRoot: f.Data, LibraryDir: f.Library})
		if err != nil || len(ts) == 0 {
			t.Logf("%s: not in this library (%v)", ds, err)
			continue
		}
		datasets = append(datasets, ds)
		// One task of the dataset, or with MEDGYM_PARITY_TASKS=N the
		// first N of every category.
		taken := map[string]int{}
		for _, task := range ts {
			key := task.View.Category
			if !stratified {
				key = ""
			}
			if taken[key] >= per {
				continue
			}
			taken[key]++
			ids = append(ids, task.View.ID)
			refs[task.View.ID] = task.Reference
		}
	}
	if len(datasets) < 2 {
		t.Skipf("library %s holds %d datasets", f.Library, len(datasets))
	}

	// medgym run, the reference policy.
	f.Datasets, f.TaskIDs, f.RunID = strings.Join(datasets, ","), strings.Join(ids, ","), "parity-run"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		t.Fatal(err)
	}
	type score struct {
		outcome string
		reward  float64
	}
	want := map[string]score{}
	for _, r := range readRun(t, ctx, f.Store, "parity-run") {
		want[r.TaskID] = score{r.Outcome, r.Reward}
	}

	dir := t.TempDir()
	args := []string{"env", "serve", "--addr", "127.0.0.1:0", "--library", f.Library, "--data", f.Data,
		"--store", filepath.Join(dir, "store"), "--state", filepath.Join(dir, "state"), "--dataset", strings.Join(datasets, ","), "--log", "error"}
	srv := startEnvArgs(t, args)
	doors := []struct {
		name string
		play parityDoor
	}{{"/v1/sessions", playV1}, {"OpenEnv HTTP", playOpenEnvHTTP}, {"OpenEnv WebSocket", playOpenEnvWS}, {"MCP", playMCP}}
	got := map[string]map[string]score{} // door → task → score
	for _, d := range doors {
		got[d.name] = map[string]score{}
		for _, id := range ids {
			code := refs[id]
			first := true
			reply := func(obs string) string {
				if first {
					first = false
					b, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": code}})
					return string(b)
				}
				lines := strings.Split(strings.TrimSpace(obs), "\n")
				b, _ := json.Marshal(map[string]any{"action": "answer", "params": map[string]string{"answer": strings.TrimSpace(lines[len(lines)-1])}})
				return string(b)
			}
			sess, reward, done, err := d.play(ctx, srv.url, id, reply)
			if err != nil {
				t.Fatalf("%s, %s: %v", d.name, id, err)
			}
			st := getSession(t, ctx, srv.url, sess)
			if !done || st.Reward != reward {
				t.Errorf("%s, %s: the door answered reward %v (done %v), the session says %v", d.name, id, reward, done, st.Reward)
			}
			got[d.name][id] = score{st.Outcome, st.Reward}
		}
	}

	// The matrix: door × dataset, agree or disagree with medgym run.
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "door\t%s\n", strings.Join(datasets, "\t"))
	rows := []string{"medgym run", "/v1/sessions", "OpenEnv HTTP", "OpenEnv WebSocket", "MCP"}
	bad := 0
	for _, door := range rows {
		cells := make([]string, len(datasets))
		for i, ds := range datasets {
			agree, n := 0, 0
			for _, id := range ids {
				if !belongs(id, ds) {
					continue
				}
				n++
				w := want[id]
				g := w
				if door != "medgym run" {
					g = got[door][id]
				}
				if g == w && w.outcome != "" {
					agree++
				} else {
					bad++
					t.Errorf("%s, %s: %s %v, medgym run %s %v", door, id, g.outcome, g.reward, w.outcome, w.reward)
				}
			}
			cells[i] = fmt.Sprintf("%d/%d agree", agree, n)
		}
		fmt.Fprintf(tw, "%s\t%s\n", door, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
	t.Logf("reward parity, reference solutions (each cell: tasks whose reward and outcome equal medgym run's):\n%s", b.String())
	for id, w := range want {
		if w.outcome != "correct" && w.outcome != "abstained_correctly" {
			t.Errorf("medgym run, %s: the reference scored %s", id, w.outcome)
		}
	}
	if bad > 0 {
		t.Fatalf("%d disagreement(s)", bad)
	}
}

// belongs reports whether task id is of dataset ds (ids are "<ds>-...").
func belongs(id, ds string) bool { return strings.HasPrefix(id, ds+"-") }

type sessionStatus struct {
	Outcome string  `json:"outcome"`
	Reward  float64 `json:"reward"`
	Done    bool    `json:"done"`
}

func getSession(t *testing.T, ctx context.Context, base, id string) sessionStatus {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/sessions/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := envBenchHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st sessionStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 || !st.Done {
		t.Fatalf("session %s: %d %+v %v", id, resp.StatusCode, st, err)
	}
	return st
}

func playV1(ctx context.Context, base, taskID string, reply func(string) string) (string, float64, bool, error) {
	var s struct {
		SessionID string `json:"session_id"`
	}
	if err := postJSON(ctx, base+"/v1/sessions", map[string]any{"task_id": taskID}, &s); err != nil {
		return "", 0, false, err
	}
	obs := ""
	for turn := 0; turn < 2; turn++ {
		var r struct {
			Observation string  `json:"observation"`
			Reward      float64 `json:"reward"`
			Done        bool    `json:"done"`
		}
		if err := postJSON(ctx, base+"/v1/sessions/"+s.SessionID+"/step", map[string]any{"turn": turn, "content": reply(obs)}, &r); err != nil {
			return "", 0, false, err
		}
		if r.Done {
			return s.SessionID, r.Reward, true, nil
		}
		obs = r.Observation
	}
	return s.SessionID, 0, false, nil
}

// openenvResult is an OpenEnv observation message's payload.
type openenvResult struct {
	Observation struct {
		Text      string `json:"text"`
		SessionID string `json:"session_id"`
	} `json:"observation"`
	Reward *float64 `json:"reward"`
	Done   bool     `json:"done"`
}

func (r openenvResult) reward() float64 {
	if r.Reward == nil {
		return 0
	}
	return *r.Reward
}

func playOpenEnvHTTP(ctx context.Context, base, taskID string, reply func(string) string) (string, float64, bool, error) {
	var r openenvResult
	if err := postJSON(ctx, base+"/openenv/reset", map[string]any{"task_id": taskID}, &r); err != nil {
		return "", 0, false, err
	}
	id, obs := r.Observation.SessionID, ""
	for turn := 0; turn < 2; turn++ {
		r = openenvResult{}
		if err := postJSON(ctx, base+"/openenv/step", map[string]any{"session_id": id, "turn": turn, "action": map[string]any{"content": reply(obs)}}, &r); err != nil {
			return "", 0, false, err
		}
		if r.Done {
			return id, r.reward(), true, nil
		}
		obs = r.Observation.Text
	}
	return id, 0, false, nil
}

func playOpenEnvWS(ctx context.Context, base, taskID string, reply func(string) string) (string, float64, bool, error) {
	ws, _, err := websocket.Dial(ctx, strings.Replace(base, "http://", "ws://", 1)+"/openenv/ws", nil)
	if err != nil {
		return "", 0, false, err
	}
	defer func() { _ = ws.Close(websocket.StatusNormalClosure, "") }()
	ws.SetReadLimit(1 << 24)
	send := func(msg any) (openenvResult, error) {
		var out struct {
			Type string        `json:"type"`
			Data openenvResult `json:"data"`
		}
		b, err := json.Marshal(msg)
		if err != nil {
			return out.Data, err
		}
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			return out.Data, err
		}
		_, raw, err := ws.Read(ctx)
		if err != nil {
			return out.Data, err
		}
		if err := json.Unmarshal(raw, &out); err != nil || out.Type != "observation" {
			return out.Data, fmt.Errorf("answer %.300s (%v)", raw, err)
		}
		return out.Data, nil
	}
	r, err := send(map[string]any{"type": "reset", "data": map[string]any{"task_id": taskID}})
	if err != nil {
		return "", 0, false, err
	}
	id, obs := r.Observation.SessionID, ""
	for range 2 {
		if r, err = send(map[string]any{"type": "step", "data": map[string]any{"content": reply(obs)}}); err != nil {
			return "", 0, false, err
		}
		if r.Done {
			return id, r.reward(), true, nil
		}
		obs = r.Observation.Text
	}
	return id, 0, false, nil
}

// playMCP plays the replies as MCP tool calls (the action's name, its
// params as the arguments) with the official Go SDK's client.
func playMCP(ctx context.Context, base, taskID string, reply func(string) string) (string, float64, bool, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "medgym-parity", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp?task_id=" + taskID}, nil)
	if err != nil {
		return "", 0, false, err
	}
	defer func() { _ = cs.Close() }()
	obs := ""
	for range 2 {
		var act struct {
			Action string         `json:"action"`
			Params map[string]any `json:"params"`
		}
		if err := json.Unmarshal([]byte(reply(obs)), &act); err != nil {
			return "", 0, false, err
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: act.Action, Arguments: act.Params})
		if err != nil {
			return "", 0, false, err
		}
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return "", 0, false, err
		}
		var sc struct {
			SessionID string  `json:"session_id"`
			Reward    float64 `json:"reward"`
			Done      bool    `json:"done"`
		}
		if err := json.Unmarshal(b, &sc); err != nil || res.IsError {
			return "", 0, false, fmt.Errorf("tool %s: %s (%v)", act.Action, b, err)
		}
		if sc.Done {
			return sc.SessionID, sc.Reward, true, nil
		}
		if len(res.Content) > 0 {
			if t, ok := res.Content[0].(*mcp.TextContent); ok {
				obs = t.Text
			}
		}
	}
	return "", 0, false, errors.New("the episode did not end after the answer")
}
