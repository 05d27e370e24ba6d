package systemtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
)

// flakyModel serves a fakellm on a fixed address and can go down in two
// ways: answering 503, or not listening at all (connections refused).
type flakyModel struct {
	t    *testing.T
	addr string
	h    http.Handler

	unavailable atomic.Bool // answer 503
	during      atomic.Int64

	mu  sync.Mutex
	srv *http.Server
}

func newFlakyModel(t *testing.T, h http.Handler) *flakyModel {
	m := &flakyModel{t: t, addr: freeAddr(t), h: h}
	m.listen()
	t.Cleanup(m.refuse)
	return m
}

func (m *flakyModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.unavailable.Load() {
		m.during.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"message":"no healthy upstream (test outage)","type":"ServiceUnavailable","code":503}}`)
		return
	}
	m.h.ServeHTTP(w, r)
}

// listen serves on m.addr again.
func (m *flakyModel) listen() {
	m.t.Helper()
	var (
		l   net.Listener
		err error
	)
	for range 100 { // the port was ours a moment ago; wait for the kernel to let it go
		if l, err = net.Listen("tcp", m.addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		m.t.Fatalf("listen again on %s: %v", m.addr, err)
	}
	srv := &http.Server{Handler: m}
	m.mu.Lock()
	m.srv = srv
	m.mu.Unlock()
	go srv.Serve(l)
}

// refuse closes the listener and every connection: connections are refused.
func (m *flakyModel) refuse() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv != nil {
		m.srv.Close()
		m.srv = nil
	}
}

// TestModelOutageMidRun: the model endpoint goes away in the middle of a
// run, answering 503 for 12 s, then refusing connections for 12 s, then
// comes back. The episodes in flight wait for it (the dispatcher admits no
// more than its in-flight bound meanwhile), `medgym run`'s progress line
// says the endpoint is down, and every episode ends with the agent's
// outcome: none is an infrastructure failure, also not from the
// reconciliation, which looks every second while the workers hold the
// waiting episodes' messages.
func TestModelOutageMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps the model endpoint down for 24 s")
	}
	const (
		episodes  = 24
		downAfter = 6 // answers
		phase     = 12 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fake := fakellm.New(fakellm.Config{Script: []string{answerReply}, Seed: 1, Model: "fake", LatencyMean: 100 * time.Millisecond})
	model := newFlakyModel(t, fake)
	f := baseFlags(t)
	f.Policy, f.LLMURL, f.Model = "openai", "http://"+model.addr+"/v1", "fake"
	f.Limit, f.RunID, f.MaxInFlight, f.LogLevel, f.Quiet = episodes, "modelout", 4, "warn", false
	// The reconciliation looks every second: an episode whose message a
	// worker holds while it waits out the outage is in play, never lost.
	f.Dispatcher.Reconcile = time.Second
	logs := &syncBuffer{}
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	var res cli.RunResult
	finished := make(chan error, 1)
	go func() {
		var err error
		res, err = cli.RunSpec(ctx, spec, f, logs)
		finished <- err
	}()
	for fake.Stats().ByStatus[http.StatusOK] < downAfter {
		select {
		case err := <-finished:
			t.Fatalf("run ended before the outage: %v\n%s", err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}

	model.unavailable.Store(true)
	time.Sleep(phase)
	model.refuse()
	time.Sleep(phase)
	model.unavailable.Store(false)
	answered := fake.Stats().ByStatus[http.StatusOK]
	model.listen()
	t.Logf("model endpoint down for %s (%d answers 503), %d of %d episodes answered before", 2*phase, model.during.Load(), answered, episodes)
	if model.during.Load() == 0 || answered == episodes {
		t.Fatal("no request met the outage")
	}

	if err := <-finished; err != nil {
		t.Fatalf("run: %v\n%s", err, tail(logs.String(), 6000))
	}
	if res.Total != episodes || res.Outcomes[schemas.OutcomeInfraFailure] != 0 || res.Outcomes[schemas.OutcomeIncorrect] != episodes {
		t.Fatalf("outcomes %v of %d episodes; want %d incorrect (the scripted answer), no infra_failure\n%s", res.Outcomes, res.Total, episodes, tail(logs.String(), 6000))
	}
	for _, s := range []string{"llm endpoint down", "llm endpoint answers again", "model endpoint down ("} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("the run's output never said %q:\n%s", s, tail(logs.String(), 4000))
		}
	}
}

// sizeRecorder records the largest request body a handler is sent.
type sizeRecorder struct {
	h       http.Handler
	largest atomic.Int64
}

func (s *sizeRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if n := int64(len(body)); n > s.largest.Load() {
		s.largest.Store(n)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.h.ServeHTTP(w, r)
}

// TestHugeModelReply: a model that answers 20 MB of `{"a":` (objects that
// never close) costs one format-error turn: the stored turn keeps the
// reply's head and tail and its full size, the next request carries the
// capped reply (not 20 MB), and the episode goes on to the scripted answer.
func TestHugeModelReply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	huge := strings.Repeat(`{"a":`, 4<<20)
	rec := &sizeRecorder{h: fakellm.New(fakellm.Config{Script: []string{huge, answerReply}, Seed: 1, Model: "fake"})}
	model := newFlakyModel(t, rec)
	f := baseFlags(t)
	f.Policy, f.LLMURL, f.Model = "openai", "http://"+model.addr+"/v1", "fake"
	f.Limit, f.RunID, f.MaxTokens = 1, "hugereply", 0 // no max_tokens: the fake sends the whole reply
	res, rows := runToEnd(t, ctx, f)
	if res.Outcomes[schemas.OutcomeIncorrect] != 1 {
		t.Fatalf("outcomes %v, want the scripted answer scored incorrect", res.Outcomes)
	}
	if len(rows) != 1 || len(rows[0].Turns) != 2 {
		t.Fatalf("%d rows; want 1 with 2 turns", len(rows))
	}
	t0 := rows[0].Turns[0]
	if !strings.Contains(t0.ParseError, agent.ErrReplyTooLong.Error()) || !strings.Contains(t0.ParseError, fmt.Sprint(len(huge))) {
		t.Errorf("turn 0 parse error %q: want reply too long, with its size %d", t0.ParseError, len(huge))
	}
	if len(t0.RawText) > agent.MaxReplyBytes+200 || !strings.HasPrefix(t0.RawText, `{"a":{"a":`) || !strings.HasSuffix(t0.RawText, `{"a":`) {
		t.Errorf("turn 0 keeps %d bytes of the reply; want head and tail within the cap", len(t0.RawText))
	}
	if n := rec.largest.Load(); n > 2*agent.MaxReplyBytes+64<<10 {
		t.Errorf("the largest request was %d bytes: the 20 MB reply went back to the model", n)
	}
}

// runToEnd runs f's spec in-process and returns its result and stored rows.
func runToEnd(t *testing.T, ctx context.Context, f *cli.RunFlags) (cli.RunResult, []parquet.Row) {
	t.Helper()
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.RunSpec(ctx, spec, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return res, readRun(t, ctx, f.Store, f.RunID)
}
