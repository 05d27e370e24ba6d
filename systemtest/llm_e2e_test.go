package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/services/llm-worker/llmworker"
	"github.com/medgym/medgym/services/llm-worker/policy"
	"github.com/medgym/medgym/tasks"
)

func actionJSON(name, key, value string) string {
	b, _ := json.Marshal(map[string]any{"action": name, "params": map[string]string{key: value}})
	return string(b)
}

// episodeOf reads the episode id the llm-worker sends as "user".
func episodeOf(body []byte) string {
	var r struct {
		User string `json:"user"`
	}
	_ = json.Unmarshal(body, &r)
	return r.User
}

// sanitizeTaskID is how the dispatcher spells a task id inside an episode id.
func sanitizeTaskID(id string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, id)
}

// The robustness groups: what the fake model does in an episode, and the
// outcome and turn count that must come of it.
type group struct {
	name    string
	outcome schemas.Outcome
	turns   int32
	script  func(reference string) []string // nil: every request fails with 500
}

var robustnessGroups = []group{
	{"reference", schemas.OutcomeCorrect, 1, func(ref string) []string {
		return []string{actionJSON("validate_code", "code", ref)}
	}},
	{"garbage-then-reference", schemas.OutcomeCorrect, 2, func(ref string) []string {
		return []string{"The BMI is about 22; let me compute {\"action\": \"validate_code\", \"params\": {", actionJSON("validate_code", "code", ref)}
	}},
	{"wrong", schemas.OutcomeIncorrect, 2, func(string) []string {
		return []string{actionJSON("validate_code", "code", "answer = 987654.321\nprint(answer)"), actionJSON("answer", "answer", "-987654.321")}
	}},
	{"garbage", schemas.OutcomeFormatError, 3, func(string) []string {
		return []string{"I think the answer is 42.", `{'action': 'validate_code', 'params': {'code': 'print(1)'}}`, "```python\nprint(42)\n```"}
	}},
	{"endpoint-down", schemas.OutcomeInfraFailure, 0, nil},
}

// fleet is the fake endpoint of the robustness test: one fakellm per
// episode, scripted by the episode's group, each with the same transient
// fault rates (a different seed each); the endpoint-down group always
// answers 500.
type fleet struct {
	runID  string
	groups map[string]int    // sanitized task id → group
	refs   map[string]string // sanitized task id → reference solution

	mu        sync.Mutex
	servers   map[string]*fakellm.Server
	down      int
	malformed int // 200 answers with a broken body
}

func seedOf(s string) uint64 {
	h := fnv.New64a()
	io.WriteString(h, s)
	return h.Sum64() >> 1
}

func (f *fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ep := episodeOf(body)
	task := strings.TrimSuffix(strings.TrimPrefix(ep, f.runID+"--"), "-k0")
	g, ok := f.groups[task]
	if !ok {
		http.Error(w, "unknown episode "+ep, http.StatusBadRequest)
		return
	}
	// Short server-asked waits keep the retries fast (429s ask 20 ms).
	w.Header().Set("retry-after-ms", "1")
	f.mu.Lock()
	srv := f.servers[ep]
	if srv == nil && robustnessGroups[g].script != nil {
		srv = fakellm.New(fakellm.Config{
			Script: robustnessGroups[g].script(f.refs[task]), Seed: int64(seedOf(ep)),
			ErrorRate429: 0.10, ErrorRate500: 0.10, MalformedRate: 0.05,
		})
		f.servers[ep] = srv
	}
	if srv == nil {
		f.down++
	}
	f.mu.Unlock()
	if srv == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"message":"the endpoint is down (test)","type":"InternalServerError","code":500}}`)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	tw := &teeWriter{ResponseWriter: w, status: http.StatusOK}
	srv.ServeHTTP(tw, r)
	if tw.status == http.StatusOK && !json.Valid(tw.buf.Bytes()) {
		f.mu.Lock()
		f.malformed++
		f.mu.Unlock()
	}
}

// stats counts requests by status; -200 counts the malformed 200s.
func (f *fleet) stats() (requests int, byStatus map[int]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byStatus = map[int]int{500: f.down, -200: f.malformed}
	requests = f.down
	for _, s := range f.servers {
		st := s.Stats()
		requests += st.Requests
		for k, v := range st.ByStatus {
			byStatus[k] += v
		}
	}
	return requests, byStatus
}

// TestRobustness200Episodes: ≥ 200 MedCalc episodes against a fake endpoint
// with 20 % 429/500 answers and 5 % malformed bodies, in five groups whose
// outcome is known in advance: every episode is accounted for, each with
// its group's outcome and turn count.
func TestRobustness200Episodes(t *testing.T) {
	if testing.Short() {
		t.Skip("long: 210 episodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: f.Data})
	if err != nil {
		t.Fatal(err)
	}
	const n = 210
	if len(ts) < n {
		t.Fatalf("%d MedCalc test tasks, want ≥ %d", len(ts), n)
	}
	fl := &fleet{runID: "robust", groups: map[string]int{}, refs: map[string]string{}, servers: map[string]*fakellm.Server{}}
	var ids []string
	for i, task := range ts[:n] {
		id := sanitizeTaskID(task.View.ID)
		if _, dup := fl.groups[id]; dup {
			t.Fatalf("task id %s twice", id)
		}
		fl.groups[id], fl.refs[id] = i%len(robustnessGroups), task.Reference
		ids = append(ids, task.View.ID)
	}
	srv := httptest.NewServer(fl)
	defer srv.Close()
	f.Policy, f.LLMURL, f.Model, f.RunID = "openai", srv.URL+"/v1", fakellm.DefaultModel, fl.runID
	f.TaskIDs, f.MaxTurns = strings.Join(ids, ","), 3
	f.LLM.LLM.MaxRetries, f.LLM.LLM.Timeout = 8, 30*time.Second
	// The endpoint-down episodes give up after their retries while others
	// get answers; the last of them, alone with a failing endpoint, wait it
	// out until their clock.
	f.LLM.EpisodeClock = time.Minute
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d episodes in %s: %v", res.Total, time.Since(start).Round(time.Millisecond), res.Outcomes)
	if res.Total != n {
		t.Fatalf("run has %d episodes, want %d", res.Total, n)
	}
	rows := readRun(t, ctx, f.Store, fl.runID)
	if len(rows) != n {
		t.Fatalf("store holds %d rows, want %d", len(rows), n)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.EpisodeID] {
			t.Fatalf("episode %s stored twice", r.EpisodeID)
		}
		seen[r.EpisodeID] = true
		g := robustnessGroups[fl.groups[sanitizeTaskID(r.TaskID)]]
		if schemas.Outcome(r.Outcome) != g.outcome || r.NumTurns != g.turns {
			t.Errorf("episode %s (%s): outcome %s with %d turns, want %s with %d (termination %s, error %q)",
				r.EpisodeID, g.name, r.Outcome, r.NumTurns, g.outcome, g.turns, r.Termination, r.Error)
		}
		if g.outcome == schemas.OutcomeInfraFailure && !strings.Contains(r.Error, "endpoint is down") {
			t.Errorf("episode %s: infra failure error %q", r.EpisodeID, r.Error)
		}
	}
	want := map[schemas.Outcome]int{}
	for i := range n {
		want[robustnessGroups[i%len(robustnessGroups)].outcome]++
	}
	for o, c := range want {
		if res.Outcomes[o] != c {
			t.Errorf("outcome %s: %d episodes, want %d", o, res.Outcomes[o], c)
		}
	}
	requests, byStatus := fl.stats()
	t.Logf("fake endpoint: %d requests, by status %v", requests, byStatus)
	if byStatus[429] == 0 || byStatus[500] <= want[schemas.OutcomeInfraFailure]*9 || byStatus[-200] == 0 {
		t.Errorf("faults were not injected: %v", byStatus)
	}
}

// recorder keeps every chat request and its response body.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	request, response []byte
	status            int
}

type teeWriter struct {
	http.ResponseWriter
	buf    bytes.Buffer
	status int
}

func (w *teeWriter) WriteHeader(s int) { w.status = s; w.ResponseWriter.WriteHeader(s) }
func (w *teeWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	return w.ResponseWriter.Write(b)
}

func (rc *recorder) all() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.reqs)
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	tw := &teeWriter{ResponseWriter: w, status: http.StatusOK}
	rc.next.ServeHTTP(tw, r)
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		return
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, recorded{body, tw.buf.Bytes(), tw.status})
	rc.mu.Unlock()
}

// TestTokenExactRecords: prompt token ids, completion token ids and
// logprobs reach the Parquet row exactly as the server sent them.
func TestTokenExactRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: f.Data})
	if err != nil {
		t.Fatal(err)
	}
	task := ts[5]
	script := []string{
		"Let me look first.\n" + actionJSON("validate_code", "code", "x = 1/0"),
		"not an action — ünïcode 🧪 survives the tokenizer",
		actionJSON("validate_code", "code", task.Reference),
	}
	rec := &recorder{next: fakellm.New(fakellm.Config{Script: script, Seed: 7, Model: "tok-model"})}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	f.Policy, f.LLMURL, f.Model, f.RunID, f.Logprobs = "openai", srv.URL+"/v1", "tok-model", "tokens", true
	f.TaskIDs = task.View.ID
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.Store, "tokens")
	if len(rows) != 1 || rows[0].Outcome != string(schemas.OutcomeCorrect) || len(rows[0].Turns) != 3 {
		t.Fatalf("rows %+v", rows)
	}
	r := rows[0]
	// Responses by conversation length: turn i is asked with 2+2i messages.
	byLen := map[int]recorded{}
	for _, rq := range rec.all() {
		var req struct {
			Messages       []schemas.ChatMessage `json:"messages"`
			Logprobs       bool                  `json:"logprobs"`
			ReturnTokenIDs bool                  `json:"return_token_ids"`
		}
		if err := json.Unmarshal(rq.request, &req); err != nil || !req.Logprobs || !req.ReturnTokenIDs {
			t.Fatalf("request %s: logprobs/token ids not asked (%v)", rq.request, err)
		}
		if rq.status == http.StatusOK {
			byLen[len(req.Messages)] = rq
		}
	}
	for i, turn := range r.Turns {
		rq, ok := byLen[2+2*i]
		if !ok {
			t.Fatalf("no response recorded for turn %d", i)
		}
		var resp struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
				Logprobs struct {
					Content []struct {
						Logprob float64 `json:"logprob"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
		}
		if err := json.Unmarshal(rq.response, &resp); err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		lps := make([]float32, len(ch.Logprobs.Content))
		for j, c := range ch.Logprobs.Content {
			lps[j] = float32(c.Logprob)
		}
		msgs := make([]schemas.ChatMessage, 2+2*i)
		for j := range msgs {
			msgs[j] = schemas.ChatMessage{Role: r.Messages[j].Role, Content: r.Messages[j].Content}
		}
		switch {
		case turn.RawText != script[i]:
			t.Fatalf("turn %d raw text %q", i, turn.RawText)
		case !slices.Equal(turn.CompletionTokenIDs, ch.TokenIDs) || !slices.Equal(turn.CompletionTokenIDs, fakellm.CompletionTokenIDs(script[i])):
			t.Fatalf("turn %d completion ids %v, server sent %v", i, turn.CompletionTokenIDs, ch.TokenIDs)
		case !slices.Equal(turn.PromptTokenIDs, resp.PromptTokenIDs) || !slices.Equal(turn.PromptTokenIDs, fakellm.PromptTokenIDs(msgs)):
			t.Fatalf("turn %d prompt ids %v, server sent %v", i, turn.PromptTokenIDs, resp.PromptTokenIDs)
		case !slices.Equal(turn.CompletionLogprobs, lps) || len(lps) != len(ch.TokenIDs) || len(lps) == 0:
			t.Fatalf("turn %d logprobs %v, server sent %v", i, turn.CompletionLogprobs, lps)
		case int(turn.CompletionTokens) != len(ch.TokenIDs) || int(turn.PromptTokens) != len(resp.PromptTokenIDs):
			t.Fatalf("turn %d usage %d/%d", i, turn.PromptTokens, turn.CompletionTokens)
		}
	}
}

// pipeline runs the dispatcher, a sandbox worker and the verifier on an
// embedded JetStream server; llm-workers are started by the test.
type pipeline struct {
	conn *bus.Conn
	f    *cli.RunFlags
}

func startPipeline(t *testing.T, ctx context.Context, f *cli.RunFlags) *pipeline {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(f.State, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	log := cli.NewLogger(io.Discard, "error")
	conn, err := bus.Connect(ctx, ns.ClientURL(), "test", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	// The CLI's own wiring, less the llm-worker (started by llmWorker).
	goServices(t, ctx, f, func(string) *bus.Conn { return conn }, nil, log, tasks.AgentTree(f.Library), "llm-worker")
	return &pipeline{conn: conn, f: f}
}

// llmWorker starts an llm-worker named name; the returned stop cancels it
// and waits until it has returned.
func (p *pipeline) llmWorker(t *testing.T, ctx context.Context, name, llmURL string) (stop func()) {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- llmworker.Run(wctx, p.conn, llmworker.Config{
			DataRoot: p.f.Data, LibraryDir: p.f.Library, Worker: name, AckWait: 2 * time.Second,
			LLM: policy.ClientDefaults{DefaultBaseURL: llmURL, MaxRetries: 2, MaxRetryWait: 10 * time.Millisecond},
		}, cli.NewLogger(io.Discard, "error"))
	}()
	return func() {
		cancel()
		if err := <-done; err != nil && wctx.Err() == nil {
			t.Errorf("llm-worker %s: %v", name, err)
		}
	}
}

// TestResumeAfterWorkerRestart: an llm-worker stopped in the middle of an
// episode's second policy step loses nothing; a second worker continues
// from the episode state in the key-value bucket, and the trajectory has
// each turn exactly once.
func TestResumeAfterWorkerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: f.Data})
	if err != nil {
		t.Fatal(err)
	}
	task := ts[7]
	script := []string{
		actionJSON("validate_code", "code", "print('looking')"),
		actionJSON("validate_code", "code", "answer = 987654.321\nprint(answer)"),
		actionJSON("validate_code", "code", task.Reference),
	}
	fake := fakellm.New(fakellm.Config{Script: script, Model: "resume-model"})
	reached := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	asked := map[int]int{} // conversation length → requests
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []schemas.ChatMessage `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		asked[len(req.Messages)]++
		first := len(req.Messages) == 4 && asked[4] == 1
		mu.Unlock()
		if first { // turn 1, first time: hang until the worker is stopped
			once.Do(func() { close(reached) })
			<-r.Context().Done()
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()

	p := startPipeline(t, ctx, f)
	stopA := p.llmWorker(t, ctx, "worker-a", srv.URL+"/v1")
	f.Policy, f.Model, f.RunID, f.TaskIDs = "openai", "resume-model", "resume", task.View.ID
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	spec.Policy.BaseURL = "" // each worker uses its default endpoint
	if err := bus.SubmitRun(ctx, p.conn, spec); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the episode never reached turn 1")
	}
	stopA()
	stopB := p.llmWorker(t, ctx, "worker-b", srv.URL+"/v1")
	defer stopB()
	status, outcomes, err := cli.Follow(ctx, p.conn, spec.RunID, io.Discard, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if status.Total != 1 || outcomes[schemas.OutcomeCorrect] != 1 {
		t.Fatalf("outcomes %v of %d", outcomes, status.Total)
	}
	rows := readRun(t, ctx, f.Store, spec.RunID)
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	if len(r.Turns) != 3 || len(r.Messages) != 2+2*3 {
		t.Fatalf("%d turns, %d messages; want 3 and 8", len(r.Turns), len(r.Messages))
	}
	for i, tr := range r.Turns {
		if int(tr.Index) != i || tr.RawText != script[i] || tr.ExecStatus != schemas.StatusOK {
			t.Fatalf("turn %d: index %d, raw %q, status %s", i, tr.Index, tr.RawText, tr.ExecStatus)
		}
		if r.Messages[2+2*i].Content != script[i] || r.Messages[3+2*i].Content != tr.Observation {
			t.Fatalf("turn %d: messages out of step", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(asked) != "map[2:1 4:2 6:1]" {
		t.Fatalf("requests by conversation length %v: want turn 0 once, turn 1 twice (the stopped worker's), turn 2 once", asked)
	}
}

// TestDebugActionUsesEpisodeModel: with no --debugger-* flags the debug
// action is answered by two calls to the episode's own endpoint and model.
func TestDebugActionUsesEpisodeModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := baseFlags(t)
	ts, err := tasks.Load(ctx, tasks.Source{Dataset: "medcalcbench", Split: "test", DataRoot: f.Data})
	if err != nil {
		t.Fatal(err)
	}
	task := ts[2]
	debug, _ := json.Marshal(map[string]any{"action": "debug", "params": map[string]string{"code": "print(w / h**2)", "error_msg": "NameError: name 'w' is not defined"}})
	// The fake answers a one-message debugger prompt with script[0] too.
	script := []string{string(debug), actionJSON("validate_code", "code", task.Reference)}
	rec := &recorder{next: fakellm.New(fakellm.Config{Script: script, Model: "dbg-model"})}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	f.Policy, f.LLMURL, f.Model, f.RunID, f.TaskIDs = "openai", srv.URL+"/v1", "dbg-model", "debug", task.View.ID
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.Store, "debug")
	if len(rows) != 1 || rows[0].Outcome != string(schemas.OutcomeCorrect) || len(rows[0].Turns) != 2 {
		t.Fatalf("rows %+v", rows)
	}
	t0 := rows[0].Turns[0]
	if t0.Action != "debug" || t0.ExecStatus != schemas.StatusInfo ||
		t0.Observation != string(debug)+"\nPlease then use validate_code action to validate the debugged code." {
		t.Fatalf("debug turn: %+v", t0)
	}
	var prompts []string
	for _, rq := range rec.all() {
		if episodeOf(rq.request) == rows[0].EpisodeID+"/debug" {
			var req struct {
				Model    string                `json:"model"`
				Messages []schemas.ChatMessage `json:"messages"`
			}
			_ = json.Unmarshal(rq.request, &req)
			if req.Model != "dbg-model" || len(req.Messages) != 1 {
				t.Fatalf("debugger request to %s with %d messages", req.Model, len(req.Messages))
			}
			prompts = append(prompts, req.Messages[0].Content)
		}
	}
	if len(prompts) != 2 || !strings.Contains(prompts[0], "summarize") ||
		!strings.Contains(prompts[1], "NameError: name 'w' is not defined") || !strings.Contains(prompts[1], task.View.Question) {
		t.Fatalf("debugger prompts %q", prompts)
	}
}
