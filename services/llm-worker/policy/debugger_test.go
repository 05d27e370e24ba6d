package policy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
)

// recorder serves fakellm and keeps every chat request body.
type recorder struct {
	mu     sync.Mutex
	bodies []map[string]any
	next   http.Handler
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	r.mu.Lock()
	r.bodies = append(r.bodies, m)
	r.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(b))
	r.next.ServeHTTP(w, req)
}

func (r *recorder) prompts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, b := range r.bodies {
		msgs, _ := b["messages"].([]any)
		var s []string
		for _, m := range msgs {
			s = append(s, m.(map[string]any)["content"].(string))
		}
		out = append(out, strings.Join(s, "\n"))
	}
	return out
}

func startFake(t *testing.T, model, reply string) (*recorder, string) {
	t.Helper()
	rec := &recorder{next: fakellm.New(fakellm.Config{Script: []string{reply}, Model: model})}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return rec, srv.URL + "/v1"
}

func debugRequest(base string) schemas.EpisodeRequest {
	return schemas.EpisodeRequest{
		RunID: "r", EpisodeID: "r--t-k0",
		Task:   schemas.TaskView{ID: "t", Dataset: "medcalcbench", Question: "What is the patient's BMI?", Context: "A 40-year-old man, 80 kg, 1.80 m."},
		Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "policy-model", BaseURL: base},
	}
}

func TestDebuggerTwoCallsOnEpisodeEndpoint(t *testing.T) {
	t.Parallel()
	rec, base := startFake(t, "policy-model", "The height is in metres; divide by height squared.")
	turns := []schemas.Turn{
		{Index: 0, ActionName: schemas.ActionRequestInfo, ParamsJSON: `{}`, Observation: "columns: weight_kg, height_m"},
		{Index: 1, ParseError: "bad json", Observation: "Error: ..."},
		{Index: 2, ActionName: schemas.ActionValidateCode, Observation: "Traceback: NameError"},
	}
	d := Debugger{Pool: &OpenAIPool{Defaults: ClientDefaults{Getenv: func(string) string { return "" }}}}
	out, err := d.Debug(t.Context(), debugRequest(base), turns, "print(w / h)", "NameError: name 'w' is not defined")
	if err != nil {
		t.Fatal(err)
	}
	if out != "The height is in metres; divide by height squared." {
		t.Fatalf("Debug = %q", out)
	}
	p := rec.prompts()
	if len(p) != 2 {
		t.Fatalf("%d debugger calls, want 2 (summary, then debug)", len(p))
	}
	if !strings.Contains(p[0], "summarize") || !strings.Contains(p[0], "columns: weight_kg, height_m") || strings.Contains(p[0], "NameError") {
		t.Fatalf("summary prompt should hold the request_info results only:\n%s", p[0])
	}
	for _, want := range []string{"What is the patient's BMI?", "80 kg", "The height is in metres", "print(w / h)", "NameError: name 'w' is not defined"} {
		if !strings.Contains(p[1], want) {
			t.Fatalf("debug prompt lacks %q:\n%s", want, p[1])
		}
	}
	for i, b := range rec.bodies {
		if b["model"] != "policy-model" || b["temperature"] != 0.0 || b["max_tokens"] != 2048.0 || b["logprobs"] != nil {
			t.Fatalf("call %d: model %v temperature %v max_tokens %v logprobs %v", i, b["model"], b["temperature"], b["max_tokens"], b["logprobs"])
		}
	}
}

func TestDebuggerConfiguredModel(t *testing.T) {
	t.Parallel()
	polRec, polBase := startFake(t, "policy-model", "from the policy endpoint")
	dbgRec, dbgBase := startFake(t, "gpt-4.1-mini", "from the debugger endpoint")
	var keys []string
	getenv := func(k string) string { keys = append(keys, k); return "key-" + k }
	d := Debugger{
		Config: DebuggerConfig{BaseURL: dbgBase, Model: "gpt-4.1-mini", APIKeyEnv: "DEBUGGER_KEY", MaxTokens: 100},
		Pool:   &OpenAIPool{Defaults: ClientDefaults{Getenv: getenv}},
	}
	out, err := d.Debug(t.Context(), debugRequest(polBase), nil, "x", "y")
	if err != nil || out != "from the debugger endpoint" {
		t.Fatalf("Debug = %q, %v", out, err)
	}
	if len(polRec.prompts()) != 0 || len(dbgRec.prompts()) != 2 {
		t.Fatalf("calls: policy endpoint %d, debugger endpoint %d", len(polRec.prompts()), len(dbgRec.prompts()))
	}
	if !strings.Contains(dbgRec.prompts()[0], "no information was requested") {
		t.Fatalf("summary prompt without request_info results:\n%s", dbgRec.prompts()[0])
	}
	if len(keys) != 1 || keys[0] != "DEBUGGER_KEY" || dbgRec.bodies[0]["max_tokens"] != 100.0 {
		t.Fatalf("key variables read %v, max_tokens %v", keys, dbgRec.bodies[0]["max_tokens"])
	}
}

func TestDebuggerErrors(t *testing.T) {
	t.Parallel()
	d := Debugger{Pool: &OpenAIPool{}}
	ref := schemas.EpisodeRequest{Policy: schemas.PolicySpec{Name: schemas.PolicyReference, Model: ReferenceModel}}
	if _, err := d.Debug(t.Context(), ref, nil, "x", "y"); err == nil || !strings.Contains(err.Error(), "--debugger-model") {
		t.Fatalf("reference episode without a debugger model: %v", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"message":"bad key"}}`)
	}))
	defer srv.Close()
	if _, err := d.Debug(t.Context(), debugRequest(srv.URL+"/v1"), nil, "x", "y"); err == nil || !strings.Contains(err.Error(), "bad key") {
		t.Fatalf("refused debugger call: %v", err)
	}
}

// TestPoolKeysOnTokenIDs: a run with logprobs must not reuse a client made
// for a run without (it would never ask for token ids).
func TestPoolKeysOnTokenIDs(t *testing.T) {
	t.Parallel()
	p := &OpenAIPool{Defaults: ClientDefaults{DefaultBaseURL: "http://127.0.0.1:1/v1"}}
	a, err := p.client("", "m", "", false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.client("", "m", "", true)
	c, _ := p.client("", "m", "OPENAI_API_KEY", false)
	if a == b || a != c {
		t.Fatalf("clients: plain %p, token ids %p, plain again %p", a, b, c)
	}
}
