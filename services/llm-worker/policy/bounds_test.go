package policy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
)

// playAgainst runs one episode of the openai policy against h, with the
// worker's client defaults (waiting out outages) and the options' episode
// clock.
func playAgainst(t *testing.T, h http.HandlerFunc, timeoutSec int) schemas.EpisodeResult {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then net/http notices a client that hangs up
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	pool := &OpenAIPool{Defaults: ClientDefaults{DefaultBaseURL: srv.URL + "/v1", Timeout: 5 * time.Minute, MaxRetries: 4,
		WaitOutage: true, Getenv: func(string) string { return "" }}}
	e := &episode.Engine{Policy: func(s schemas.PolicySpec) (episode.Policy, error) { return pool.Policy(s) }}
	opts := schemas.DefaultOptions()
	opts.EpisodeTimeoutSec = timeoutSec
	req := schemas.EpisodeRequest{RunID: "r", EpisodeID: "r--t-k0", Options: opts,
		Task:   schemas.TaskView{ID: "t", Dataset: "medcalcbench", Question: "q"},
		Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "m"}}
	st, step, err := e.Start(t.Context(), req)
	if err != nil || step.Result == nil {
		t.Fatalf("step %+v, err %v", step, err)
	}
	return *st.Result
}

// TestVLLMContextLengthIsTurnLimit: vLLM's 400 for a conversation over the
// model's context ends the episode at the turn limit (an agent outcome,
// scored 0), not as an infrastructure failure.
func TestVLLMContextLengthIsTurnLimit(t *testing.T) {
	t.Parallel()
	r := playAgainst(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 33000 tokens (32000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`)
	}, 0)
	if r.Termination != schemas.EndTurnLimit || r.FinalAnswer != "" || !strings.Contains(r.Error, "maximum context length") {
		t.Fatalf("%s %q (%s); want turn_limit without an answer, saying why", r.Termination, r.FinalAnswer, r.Error)
	}
}

// TestHangingModelTimesOut: a model that never answers, in an episode with
// a 1 s clock (its per-request timeout is 5 minutes), is cancelled by the
// clock and the episode ends as a timeout, not infra_failure; an endpoint
// answering 503 until the clock runs out is the infrastructure's failure.
func TestHangingModelTimesOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want schemas.Termination
	}{
		{"hang", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, schemas.EndTimeout},
		{"503", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("retry-after-ms", "50")
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}, schemas.EndInfraFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := playAgainst(t, tc.h, 1)
			if r.Termination != tc.want {
				t.Fatalf("%s (%s); want %s", r.Termination, r.Error, tc.want)
			}
		})
	}
}
