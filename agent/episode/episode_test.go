package episode_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
)

// script is a policy that replies with its entries in order: the reply to a
// conversation with n assistant messages is entry min(n, len-1). Each reply
// carries token ids and logprobs derived from its index.
type script []string

func (s script) Complete(_ context.Context, _ schemas.EpisodeRequest, msgs []schemas.ChatMessage) (episode.Completion, error) {
	n := 0
	for _, m := range msgs {
		if m.Role == "assistant" {
			n++
		}
	}
	i := min(n, len(s)-1)
	return episode.Completion{
		Text: s[i], FinishReason: "stop", PromptTokens: len(msgs), CompletionTokens: 2,
		PromptTokenIDs: []int32{int32(len(msgs)), 1}, TokenIDs: []int32{int32(100 + i), 7}, Logprobs: []float32{-0.5, float32(-i)},
	}, nil
}

type failing struct{ err error }

func (f failing) Complete(context.Context, schemas.EpisodeRequest, []schemas.ChatMessage) (episode.Completion, error) {
	return episode.Completion{}, f.err
}

func code(src string) string {
	b, _ := json.Marshal(map[string]any{"action": "validate_code", "params": map[string]string{"code": src}})
	return string(b)
}

func answer(a string) string {
	b, _ := json.Marshal(map[string]any{"action": "answer", "params": map[string]string{"answer": a}})
	return string(b)
}

func engine(p episode.Policy) *episode.Engine {
	return &episode.Engine{
		Policy: func(schemas.PolicySpec) (episode.Policy, error) { return p, nil },
		Now:    func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
		Worker: "test",
	}
}

// endOnBoth is for tests of an episode that ends on its first accepted
// code run (the default, end_on answer, needs an explicit answer).
func endOnBoth(o *schemas.EpisodeOptions) { o.EndOn = schemas.EndOnBoth }

func request(mut func(*schemas.EpisodeOptions)) schemas.EpisodeRequest {
	opts := schemas.DefaultOptions()
	opts.MaxTurns = 5
	if mut != nil {
		mut(&opts)
	}
	return schemas.EpisodeRequest{
		RunID: "r", EpisodeID: "r--t-k0",
		Task: schemas.TaskView{ID: "t", Dataset: "medcalcbench", Split: "test", Question: "What is the BMI?",
			PermittedActions: []string{"validate_code", "debug", "terminal", "answer"}},
		Policy:  schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "m"},
		Options: opts,
	}
}

// sandbox answers an action: stdout is the printed value, accepted says
// what the verifier would say when a check is wanted.
type sandbox func(a schemas.ActionRequest) (schemas.ExecResult, bool)

func printed(want string) sandbox {
	return func(a schemas.ActionRequest) (schemas.ExecResult, bool) {
		var p struct{ Code string }
		_ = json.Unmarshal(a.Action.Params, &p)
		out := strings.TrimSuffix(strings.TrimPrefix(p.Code, "print("), ")") + "\n"
		return schemas.ExecResult{Status: schemas.StatusOK, Stdout: out, Message: out}, strings.TrimSpace(out) == want
	}
}

// play runs an episode to its end, answering each action with sb. It
// checks every step's invariants and returns the final state and the
// actions sent.
func play(t *testing.T, e *episode.Engine, req schemas.EpisodeRequest, sb sandbox) (schemas.EpisodeState, []schemas.ActionRequest) {
	t.Helper()
	ctx := t.Context()
	st, step, err := e.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var sent []schemas.ActionRequest
	for range 100 {
		if step.Result != nil {
			if step.Action != nil || st.Result == nil || st.PendingAction != nil {
				t.Fatalf("finished step with action %v / state result %v / pending %v", step.Action, st.Result, st.PendingAction)
			}
			checkTrajectory(t, *st.Result)
			return st, sent
		}
		a := *step.Action
		if st.PendingAction == nil || st.PendingAction.Ref.Turn != a.Ref.Turn || a.Ref.Turn != len(st.Turns)-1 {
			t.Fatalf("action for turn %d, %d turns, pending %v", a.Ref.Turn, len(st.Turns), st.PendingAction)
		}
		sent = append(sent, a)
		res, ok := sb(a)
		obs := schemas.Observation{Ref: a.Ref, Action: a.Action.Name, Result: res, CheckWanted: a.Check}
		if a.Check {
			obs.Check = &schemas.Check{Accepted: ok, Answer: strings.TrimSpace(res.Stdout), Verdict: map[bool]string{true: "match", false: "off by 3"}[ok]}
		}
		before, _ := json.Marshal(st)
		next, nstep, err := e.Continue(ctx, st, obs)
		if err != nil {
			t.Fatal(err)
		}
		if after, _ := json.Marshal(st); string(after) != string(before) {
			t.Fatal("Continue changed the caller's state")
		}
		// A redelivered observation is stale and changes nothing.
		if _, _, err := e.Continue(ctx, next, obs); !errors.Is(err, episode.ErrStale) {
			t.Fatalf("repeated observation: %v, want ErrStale", err)
		}
		st, step = next, nstep
	}
	t.Fatal("episode did not end")
	return st, nil
}

// checkTrajectory: turns are numbered 0..n-1, and the conversation is the
// two opening messages then one assistant reply and one user message per
// turn (the last turn may lack its user message).
func checkTrajectory(t *testing.T, r schemas.EpisodeResult) {
	t.Helper()
	for i, tr := range r.Turns {
		if tr.Index != i {
			t.Fatalf("turn %d has index %d", i, tr.Index)
		}
		if m := r.Messages[2+2*i]; m.Role != "assistant" || m.Content != tr.RawText {
			t.Fatalf("message %d is %s %q, want the raw text of turn %d", 2+2*i, m.Role, m.Content, i)
		}
		if j := 3 + 2*i; j < len(r.Messages) && (r.Messages[j].Role != "user" || r.Messages[j].Content != tr.Observation) {
			t.Fatalf("message %d is %s %q, want turn %d's observation %q", j, r.Messages[j].Role, r.Messages[j].Content, i, tr.Observation)
		}
	}
	if n := len(r.Messages) - 2; n != 2*len(r.Turns) && n != 2*len(r.Turns)-1 {
		t.Fatalf("%d messages for %d turns", len(r.Messages), len(r.Turns))
	}
}

func TestParseFailureConsumesATurnAndKeepsRawText(t *testing.T) {
	t.Parallel()
	bad := `I'll run {"action": "validate_code", "params": {"code": `
	st, sent := play(t, engine(script{bad, code("print(22.5)")}), request(endOnBoth), printed("22.5"))
	r := st.Result
	if r.Termination != schemas.EndAccepted || r.FinalAnswer != "22.5" || len(r.Turns) != 2 || len(sent) != 1 {
		t.Fatalf("termination %s answer %q, %d turns, %d actions", r.Termination, r.FinalAnswer, len(r.Turns), len(sent))
	}
	t0 := r.Turns[0]
	if t0.RawText != bad || t0.ParseError == "" || t0.ActionName != "" || t0.ExecStatus != "" ||
		!strings.HasPrefix(t0.Observation, "Error: ") || !strings.HasSuffix(t0.Observation, "Please regenerate the action.") {
		t.Fatalf("turn 0 = %+v", t0)
	}
	if sent[0].Ref.Turn != 1 || len(sent[0].Replay) != 0 {
		t.Fatalf("action %+v: want turn 1, nothing to replay", sent[0].Ref)
	}
	// Token records are the policy's, per turn.
	for i, tr := range r.Turns {
		if !slices.Equal(tr.CompletionTokenIDs, []int32{int32(100 + i), 7}) || !slices.Equal(tr.CompletionLogprobs, []float32{-0.5, float32(-i)}) ||
			len(tr.PromptTokenIDs) != 2 || tr.PromptTokens != 2+2*i {
			t.Fatalf("turn %d token record: %v %v %v %d", i, tr.CompletionTokenIDs, tr.CompletionLogprobs, tr.PromptTokenIDs, tr.PromptTokens)
		}
	}
}

func TestOnlyGarbageIsFormatError(t *testing.T) {
	t.Parallel()
	st, sent := play(t, engine(script{"no json here", "{'action': 'validate_code'}", "```python\nprint(1)\n```"}),
		request(func(o *schemas.EpisodeOptions) { o.MaxTurns = 3 }), printed(""))
	r := st.Result
	if r.Termination != schemas.EndFormatError || len(r.Turns) != 3 || len(sent) != 0 {
		t.Fatalf("termination %s, %d turns, %d actions", r.Termination, len(r.Turns), len(sent))
	}
	for i, tr := range r.Turns {
		if tr.ParseError == "" || tr.RawText == "" {
			t.Fatalf("turn %d = %+v", i, tr)
		}
	}
}

func TestTurnLimit(t *testing.T) {
	t.Parallel()
	// Different wrong programs each turn: no loop, no acceptance.
	var s script
	for i := range 10 {
		s = append(s, code("print("+strings.Repeat("9", i+1)+")"))
	}
	for _, max := range []int{1, 4} {
		st, sent := play(t, engine(s), request(func(o *schemas.EpisodeOptions) { o.MaxTurns = max }), printed("22.5"))
		r := st.Result
		want := strings.Repeat("9", max)
		if r.Termination != schemas.EndTurnLimit || len(r.Turns) != max || len(sent) != max || r.FinalAnswer != want {
			t.Fatalf("max %d: termination %s, %d turns, %d actions, answer %q", max, r.Termination, len(r.Turns), len(sent), r.FinalAnswer)
		}
		for i, a := range sent {
			if len(a.Replay) != i {
				t.Fatalf("action %d replays %d earlier runs, want %d", i, len(a.Replay), i)
			}
		}
	}
	// A parse error among valid turns is a turn limit, not a format error.
	st, _ := play(t, engine(script{code("print(1)"), "garbage"}), request(func(o *schemas.EpisodeOptions) { o.MaxTurns = 3 }), printed("22.5"))
	if st.Result.Termination != schemas.EndTurnLimit || st.Result.FinalAnswer != "1" {
		t.Fatalf("termination %s answer %q", st.Result.Termination, st.Result.FinalAnswer)
	}
}

func TestLoopGuard(t *testing.T) {
	t.Parallel()
	same := code("print(7)")
	tests := []struct {
		guard     string
		wantEnd   schemas.Termination
		wantTurns int
		wantSent  int
	}{
		{"stop", schemas.EndLoop, 2, 1},      // the repeat ends the episode
		{"warn", schemas.EndTurnLimit, 4, 1}, // repeats are answered in place, never executed
		{"off", schemas.EndTurnLimit, 4, 4},  // repeats run again
	}
	for _, tt := range tests {
		st, sent := play(t, engine(script{same}), request(func(o *schemas.EpisodeOptions) { o.LoopGuard, o.MaxTurns = tt.guard, 4 }), printed("22.5"))
		r := st.Result
		if r.Termination != tt.wantEnd || len(r.Turns) != tt.wantTurns || len(sent) != tt.wantSent {
			t.Fatalf("%s: termination %s, %d turns, %d actions", tt.guard, r.Termination, len(r.Turns), len(sent))
		}
		switch tt.guard {
		case "stop":
			if r.Turns[1].Observation != "Stopped: the same action was repeated." || r.Error == "" {
				t.Fatalf("stop: %+v / %q", r.Turns[1], r.Error)
			}
		case "warn":
			for _, tr := range r.Turns[1:] {
				if tr.ExecStatus != schemas.StatusInfo || !strings.Contains(tr.Observation, "repeated your previous action") {
					t.Fatalf("warn turn %+v", tr)
				}
			}
			// The warned turns did not run: the last answer is turn 0's output.
			if r.FinalAnswer != "7" {
				t.Fatalf("final answer %q", r.FinalAnswer)
			}
		}
	}
	// A parse error in between breaks the repetition.
	st, sent := play(t, engine(script{same, "oops", same}), request(func(o *schemas.EpisodeOptions) { o.LoopGuard, o.MaxTurns = "stop", 3 }), printed("22.5"))
	if st.Result.Termination != schemas.EndTurnLimit || len(sent) != 2 {
		t.Fatalf("termination %s, %d actions", st.Result.Termination, len(sent))
	}
}

func TestEndOn(t *testing.T) {
	t.Parallel()
	right, wrong := code("print(22.5)"), code("print(30)")
	tests := []struct {
		name, endOn string
		script      script
		wantEnd     schemas.Termination
		wantAnswer  string
		wantTurns   int
	}{
		{"accepted run ends", schemas.EndOnAccepted, script{right}, schemas.EndAccepted, "22.5", 1},
		{"accepted: answer refused", schemas.EndOnAccepted, script{answer("22.5"), right}, schemas.EndAccepted, "22.5", 2},
		{"answer: accepted run goes on", schemas.EndOnAnswer, script{right, answer("22.5")}, schemas.EndAnswered, "22.5", 2},
		{"answer: wrong answer ends", schemas.EndOnAnswer, script{wrong, answer("30")}, schemas.EndAnswered, "30", 2},
		{"both: accepted run ends", schemas.EndOnBoth, script{right, answer("1")}, schemas.EndAccepted, "22.5", 1},
		{"both: answer ends", schemas.EndOnBoth, script{wrong, answer(" 22.5 ")}, schemas.EndAnswered, "22.5", 2},
		{"both: first answer ends", schemas.EndOnBoth, script{answer("7")}, schemas.EndAnswered, "7", 1},
	}
	for _, tt := range tests {
		req := request(func(o *schemas.EpisodeOptions) { o.EndOn = tt.endOn })
		st, sent := play(t, engine(tt.script), req, printed("22.5"))
		r := st.Result
		if r.Termination != tt.wantEnd || r.FinalAnswer != tt.wantAnswer || len(r.Turns) != tt.wantTurns {
			t.Fatalf("%s: termination %s answer %q turns %d", tt.name, r.Termination, r.FinalAnswer, len(r.Turns))
		}
		for _, a := range sent {
			if a.Check != (tt.endOn != schemas.EndOnAnswer) {
				t.Fatalf("%s: action check %v", tt.name, a.Check)
			}
		}
		if tt.endOn == schemas.EndOnAccepted && strings.Contains(r.Messages[0].Content+r.Messages[1].Content, `"answer"`) {
			t.Fatalf("%s: the prompt offers the answer action", tt.name)
		}
		if tt.name == "accepted: answer refused" && !strings.Contains(r.Turns[0].Observation, "answer action is not available") {
			t.Fatalf("refused answer observation %q", r.Turns[0].Observation)
		}
	}
}

// TestAnswerNeedsNoTaskPermission: the prompt offers answer whenever EndOn
// allows it, so a task whose permitted actions omit it still accepts it.
func TestAnswerNeedsNoTaskPermission(t *testing.T) {
	t.Parallel()
	req := request(nil)
	req.Task.PermittedActions = []string{"validate_code"}
	st, _ := play(t, engine(script{answer("22.5")}), req, printed("22.5"))
	if st.Result.Termination != schemas.EndAnswered || st.Result.FinalAnswer != "22.5" {
		t.Fatalf("termination %s answer %q", st.Result.Termination, st.Result.FinalAnswer)
	}
}

func TestNotPermittedIsNeverExecutedNorReplayed(t *testing.T) {
	t.Parallel()
	req := request(endOnBoth)
	req.Task.PermittedActions = []string{"validate_code"}
	term := `{"action": "terminal", "params": {"cmd": "pip install x"}}`
	st, sent := play(t, engine(script{term, code("print(22.5)")}), req, printed("22.5"))
	r := st.Result
	if r.Termination != schemas.EndAccepted || len(sent) != 1 || len(sent[0].Replay) != 0 {
		t.Fatalf("termination %s, %d actions, replay %v", r.Termination, len(sent), sent[0].Replay)
	}
	if t0 := r.Turns[0]; t0.ExecStatus != schemas.StatusInfo || !strings.Contains(t0.Observation, "not permitted") {
		t.Fatalf("turn 0 = %+v", t0)
	}
}

func TestShowVerdict(t *testing.T) {
	t.Parallel()
	wrong := code("print(30)")
	for _, tt := range []struct {
		show  bool
		endOn string
	}{{false, schemas.EndOnBoth}, {true, schemas.EndOnBoth}, {false, schemas.EndOnAnswer}, {true, schemas.EndOnAnswer}} {
		req := request(func(o *schemas.EpisodeOptions) { o.ShowVerdict, o.EndOn, o.MaxTurns = tt.show, tt.endOn, 2 })
		st, sent := play(t, engine(script{wrong, answer("30")}), req, printed("22.5"))
		obs := st.Result.Turns[0].Observation
		hasVerdict := strings.Contains(obs, "Verifier: the answer is not correct (off by 3).")
		if hasVerdict != tt.show || !strings.HasPrefix(obs, "30\n") {
			t.Fatalf("show %v end-on %s: observation %q", tt.show, tt.endOn, obs)
		}
		if sent[0].Check != (tt.show || tt.endOn != schemas.EndOnAnswer) {
			t.Fatalf("show %v end-on %s: check %v", tt.show, tt.endOn, sent[0].Check)
		}
		if strings.Contains(st.Result.Messages[3].Content, "Verifier:") != tt.show {
			t.Fatalf("the model saw %q", st.Result.Messages[3].Content)
		}
	}
}

func TestPolicyFailureIsInfraFailure(t *testing.T) {
	t.Parallel()
	st, step, err := engine(failing{errors.New("llm endpoint unavailable: status 500")}).Start(t.Context(), request(nil))
	if err != nil || step.Result == nil || st.Result.Termination != schemas.EndInfraFailure || !strings.Contains(st.Result.Error, "status 500") {
		t.Fatalf("step %+v err %v", step, err)
	}
	// A cancelled caller is not the episode's failure: the step is retried.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, step, err = engine(failing{context.Canceled}).Start(ctx, request(nil))
	if !errors.Is(err, context.Canceled) || step.Result != nil || step.Action != nil {
		t.Fatalf("cancelled: step %+v err %v", step, err)
	}
}

func TestSandboxErrorEnds(t *testing.T) {
	t.Parallel()
	st, _ := play(t, engine(script{code("print(1)")}), request(nil), func(schemas.ActionRequest) (schemas.ExecResult, bool) {
		return schemas.ExecResult{Status: schemas.StatusSandboxError, Message: "bwrap: no space"}, false
	})
	if st.Result.Termination != schemas.EndSandboxError || !strings.Contains(st.Result.Error, "bwrap: no space") {
		t.Fatalf("termination %s error %q", st.Result.Termination, st.Result.Error)
	}
}

type recordingDebugger struct {
	turns     []schemas.Turn
	code, msg string
	err       error
}

func (d *recordingDebugger) Debug(_ context.Context, _ schemas.EpisodeRequest, turns []schemas.Turn, code, msg string) (string, error) {
	d.turns, d.code, d.msg = turns, code, msg
	return "Divide by height squared.", d.err
}

func TestDebugAction(t *testing.T) {
	t.Parallel()
	dbg := `{"action": "debug", "params": {"code": "print(w/h)", "error_msg": "NameError"}}`
	for _, tt := range []struct {
		name     string
		debugger *recordingDebugger
		want     string
	}{
		{"none", nil, "The debug action is not available"},
		{"ok", &recordingDebugger{}, "Divide by height squared.\nPlease then use validate_code action to validate the debugged code."},
		{"down", &recordingDebugger{err: errors.New("status 503")}, "The debugger model could not be reached: status 503"},
	} {
		e := engine(script{code("print(1)"), dbg, code("print(22.5)")})
		if tt.debugger != nil {
			e.Debugger = tt.debugger
		}
		st, sent := play(t, e, request(endOnBoth), printed("22.5"))
		r := st.Result
		if r.Termination != schemas.EndAccepted || len(r.Turns) != 3 || len(sent) != 2 {
			t.Fatalf("%s: termination %s, %d turns, %d actions", tt.name, r.Termination, len(r.Turns), len(sent))
		}
		t1 := r.Turns[1]
		if t1.ActionName != "debug" || t1.ExecStatus != schemas.StatusInfo || !strings.HasPrefix(t1.Observation, tt.want) {
			t.Fatalf("%s: debug turn %+v", tt.name, t1)
		}
		if len(sent[1].Replay) != 1 {
			t.Fatalf("%s: the debug turn was replayed: %v", tt.name, sent[1].Replay)
		}
		if d := tt.debugger; d != nil && (d.code != "print(w/h)" || d.msg != "NameError" || len(d.turns) != 1) {
			t.Fatalf("%s: debugger got code %q msg %q and %d turns", tt.name, d.code, d.msg, len(d.turns))
		}
	}
}

func TestEpisodeTimeout(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := engine(script{code("print(1)"), code("print(2)")})
	e.Now = func() time.Time { return now }
	req := request(func(o *schemas.EpisodeOptions) { o.EpisodeTimeoutSec = 10 })
	st, step, err := e.Start(t.Context(), req)
	if err != nil || step.Action == nil {
		t.Fatal(err)
	}
	now = now.Add(11 * time.Second)
	obs := schemas.Observation{Ref: step.Action.Ref, Result: schemas.ExecResult{Status: schemas.StatusOK, Stdout: "1\n", Message: "1\n"}}
	st, _, err = e.Continue(t.Context(), st, obs)
	if err != nil || st.Result == nil || st.Result.Termination != schemas.EndTimeout || st.Result.FinalAnswer != "1" {
		t.Fatalf("result %+v err %v", st.Result, err)
	}
}

// TestUpstreamCompat plays MedAgentGym's episode rules (Compat upstream):
// the prompt has upstream's four actions only, the first accepted execution
// ends the episode, the turn limit carries no final answer even when the
// last output was right, and an action the task does not advertise runs.
func TestUpstreamCompat(t *testing.T) {
	t.Parallel()
	up := func(o *schemas.EpisodeOptions) { *o = schemas.UpstreamOptions() }
	req := request(up)
	if err := req.Options.Validate(); err != nil {
		t.Fatal(err)
	}
	// The last output is the right number, but no execution was accepted
	// (the verifier's check said no): a failure, no answer to rescue it.
	var s script
	for i := range 15 {
		s = append(s, code("print("+strings.Repeat("9", i+1)+")"))
	}
	st, sent := play(t, engine(s), req, func(a schemas.ActionRequest) (schemas.ExecResult, bool) {
		out := "22.5\n"
		if !strings.Contains(string(a.Action.Params), "999999999999999") {
			out = "7\n"
		}
		return schemas.ExecResult{Status: schemas.StatusOK, Stdout: out, Message: out}, false
	})
	r := st.Result
	if r.Termination != schemas.EndTurnLimit || len(r.Turns) != 15 || len(sent) != 15 || r.FinalAnswer != "" {
		t.Fatalf("termination %s, %d turns, %d actions, answer %q", r.Termination, len(r.Turns), len(sent), r.FinalAnswer)
	}
	// Positive control: medgym's rules keep the last output as the answer.
	med := request(func(o *schemas.EpisodeOptions) { o.MaxTurns = 2 })
	if st, _ := play(t, engine(script{code("print(1)"), code("print(22.5)")}), med, printed("nope")); st.Result.FinalAnswer != "22.5" {
		t.Fatalf("medgym rules: final answer %q", st.Result.FinalAnswer)
	}

	// First accepted execution ends it; every code run asks for a check in
	// upstream mode.
	st, sent = play(t, engine(script{code("print(30)"), code("print(22.5)"), code("print(1)")}), req, printed("22.5"))
	if st.Result.Termination != schemas.EndAccepted || len(st.Result.Turns) != 2 || !sent[0].Check || sent[0].VerifierMode != "upstream" {
		t.Fatalf("termination %s, %d turns, check %v mode %q", st.Result.Termination, len(st.Result.Turns), sent[0].Check, sent[0].VerifierMode)
	}
	sys := st.Result.Messages[0].Content
	if strings.Contains(sys, `"answer"`) || !strings.Contains(sys, "exactly three different actions") {
		t.Fatalf("upstream prompt:\n%s", sys)
	}

	// request_info is not advertised for this task, yet upstream runs it.
	ri := `{"action": "request_info", "params": {"data_path": "/data/x.csv", "info_type": "column_names", "keyterm": ""}}`
	st, sent = play(t, engine(script{ri, code("print(22.5)")}), req, printed("22.5"))
	if len(sent) != 2 || sent[0].Action.Name != "request_info" || st.Result.Turns[0].ExecStatus == schemas.StatusInfo {
		t.Fatalf("upstream request_info: %d actions, turn 0 %+v", len(sent), st.Result.Turns[0])
	}
	// An answer action is no upstream action: refused, the turn consumed.
	st, _ = play(t, engine(script{answer("22.5"), code("print(22.5)")}), req, printed("22.5"))
	if st.Result.Termination != schemas.EndAccepted || len(st.Result.Turns) != 2 {
		t.Fatalf("answer in upstream mode: %s, %d turns", st.Result.Termination, len(st.Result.Turns))
	}
}

func TestUpstreamOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, mut := range []func(*schemas.EpisodeOptions){
		func(o *schemas.EpisodeOptions) { o.EndOn = schemas.EndOnBoth },
		func(o *schemas.EpisodeOptions) { o.MaxTurns = 20 },
		func(o *schemas.EpisodeOptions) { o.VerifierMode = "strict" },
		func(o *schemas.EpisodeOptions) { o.ShowVerdict = true },
		func(o *schemas.EpisodeOptions) { o.LoopGuard = "warn" },
		func(o *schemas.EpisodeOptions) { o.EpisodeTimeoutSec = 60 },
		func(o *schemas.EpisodeOptions) { o.Compat = "paper" },
	} {
		o := schemas.UpstreamOptions()
		mut(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	// Specs written before the field: no compat, medgym's rules.
	var o schemas.EpisodeOptions
	if err := json.Unmarshal([]byte(`{"max_turns": 15, "end_on": "both", "action_timeout_sec": 120}`), &o); err != nil ||
		o.Validate() != nil || o.Upstream() {
		t.Errorf("old spec: %+v, %v", o, err)
	}
}

// awaiting replies with its queued text once, then ErrAwaitReply: a policy
// outside medgym (the environment server's client).
type awaiting struct{ next *string }

func (a *awaiting) Complete(context.Context, schemas.EpisodeRequest, []schemas.ChatMessage) (episode.Completion, error) {
	if a.next == nil {
		return episode.Completion{}, episode.ErrAwaitReply
	}
	c := episode.Completion{Text: *a.next}
	a.next = nil
	return c, nil
}

// TestAwaitReplyAndResume: with a policy outside, Start and Continue stop
// where the reply is needed (a Step with neither action nor result) and
// Resume takes it; the episode is the one a policy inside would play.
func TestAwaitReplyAndResume(t *testing.T) {
	pol := &awaiting{}
	e := engine(pol)
	ctx := t.Context()
	st, step, err := e.Start(ctx, request(nil))
	if err != nil || step.Action != nil || step.Result != nil || len(st.Messages) != 2 || len(st.Turns) != 0 {
		t.Fatalf("start: %+v %v, %d messages", step, err, len(st.Messages))
	}
	reply := func(s string) {
		pol.next = &s
		st, step, err = e.Resume(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
	}
	reply("not an action")
	if step.Action != nil || step.Result != nil || len(st.Turns) != 1 || st.Turns[0].ParseError == "" {
		t.Fatalf("after a parse error: %+v, %d turns", step, len(st.Turns))
	}
	reply(code("print(3)"))
	if step.Action == nil || st.PendingAction == nil {
		t.Fatalf("after a code reply: %+v", step)
	}
	if _, _, err := e.Resume(ctx, st); !errors.Is(err, episode.ErrStale) {
		t.Fatalf("resume with an action out: %v, want ErrStale", err)
	}
	obs := schemas.Observation{Ref: step.Action.Ref, Action: "validate_code", Result: schemas.ExecResult{Status: "ok", Stdout: "3\n", Message: "3\n"}}
	st, step, err = e.Continue(ctx, st, obs)
	if err != nil || step.Action != nil || step.Result != nil || len(st.Turns) != 2 || st.Turns[1].Observation != "3\n" {
		t.Fatalf("continue: %+v %v", step, err)
	}
	reply(answer("3"))
	if step.Result == nil || step.Result.Termination != schemas.EndAnswered || step.Result.FinalAnswer != "3" || len(step.Result.Turns) != 3 {
		t.Fatalf("answer: %+v", step.Result)
	}
}
