package session

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

func create(t *testing.T, svc *Service, opts Options) Created {
	t.Helper()
	c, err := svc.Create(context.Background(), CreateRequest{TaskID: task.ID, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func step(t *testing.T, svc *Service, id string, turn int, text string) StepResult {
	t.Helper()
	r, err := svc.Step(context.Background(), id, StepRequest{Turn: turn, Content: text, TokenIDs: []int32{int32(turn)}})
	if err != nil {
		t.Fatalf("step %d: %v", turn, err)
	}
	return r
}

// TestEpisodeThroughSteps: a parse error, a code run and an answer, each
// one step; the run is registered for the workers, the final step carries
// the verifier's reward, and the finished episode is the engine's.
func TestEpisodeThroughSteps(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t, newMemStore(), Limits{})
	c := create(t, w.svc, Options{})
	if len(c.Messages) != 2 || c.Messages[0].Role != "system" || len(c.Tools) != 3 {
		t.Fatalf("opening: %d messages, %d tools", len(c.Messages), len(c.Tools))
	}
	if len(w.runs) != 1 || w.runs[0].Admits(schemas.ClaimOf(c.Session.State.Request)) != nil {
		t.Fatalf("run records %+v do not admit the episode", w.runs)
	}
	id := c.Session.ID
	r0 := step(t, w.svc, id, 0, "no json here")
	if r0.Done || r0.Info.ParseError == "" || r0.Observation == "" {
		t.Fatalf("parse error step: %+v", r0)
	}
	r1 := step(t, w.svc, id, 1, code("print(41)"))
	if r1.Done || r1.Observation != "41\n" || r1.Info.Action != "validate_code" || r1.Info.Verdict != "" {
		t.Fatalf("code step: %+v", r1)
	}
	r2 := step(t, w.svc, id, 2, answerReply("42"))
	if !r2.Done || r2.Reward != 1 || r2.Info.Outcome != "correct" || r2.Info.Row == nil || r2.Info.Row.Store != "/store" || r2.Truncated {
		t.Fatalf("answer step: %+v", r2)
	}
	if len(w.results) != 1 || len(w.results[0].Turns) != 3 || w.results[0].Worker != "env-test" || w.results[0].Turns[2].CompletionTokenIDs[0] != 2 {
		t.Fatalf("results %+v", w.results)
	}
	if _, err := w.svc.Step(context.Background(), id, StepRequest{Turn: 3, Content: "x"}); !errors.Is(err, ErrDone) {
		t.Fatalf("step after done: %v, want ErrDone", err)
	}
	if w.svc.Live() != 0 {
		t.Fatalf("%d live sessions after the score", w.svc.Live())
	}
}

// TestTurnIdempotent: a retried turn returns the stored answer without a
// second execution, marked ReplyIgnored when its reply is not the one the
// turn was played with; a turn ahead is a TurnError naming the expected one.
func TestTurnIdempotent(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t, newMemStore(), Limits{})
	id := create(t, w.svc, Options{}).Session.ID
	first := step(t, w.svc, id, 0, code("print(7)"))
	same := step(t, w.svc, id, 0, code("print(7)"))
	other := step(t, w.svc, id, 0, code("print(8)"))
	if first.ReplyIgnored || !reflect.DeepEqual(first, same) || len(w.actions) != 1 {
		t.Fatalf("turn retried with its reply answered %+v (first %+v), %d actions executed", same, first, len(w.actions))
	}
	if !other.ReplyIgnored || other.Observation != first.Observation || len(w.actions) != 1 {
		t.Fatalf("turn retried with another reply answered %+v (first %+v), %d actions executed", other, first, len(w.actions))
	}
	if sess, err := w.svc.Get(context.Background(), id); err != nil || sess.Steps[0].ReplyIgnored || sess.State.Turns[0].RawText != code("print(7)") {
		t.Fatalf("stored step %+v, turn %q (%v): the mark or the other reply was stored", sess.Steps, sess.State.Turns[0].RawText, err)
	}
	var te *TurnError
	if _, err := w.svc.Step(context.Background(), id, StepRequest{Turn: 5, Content: "x"}); !errors.As(err, &te) || te.Want != 1 {
		t.Fatalf("turn ahead: %v, want a TurnError expecting 1", err)
	}
	if _, err := w.svc.Step(context.Background(), "nope", StepRequest{}); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("unknown session: %v", err)
	}
}

// TestRestartMidStep: a server that died with a step executing (its
// observation not yet in) is replaced by another over the same store; the
// retried step re-publishes the same action (dropped as a duplicate) and
// gets the answer once it comes, executed once.
func TestRestartMidStep(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	w1, _ := newWorld(t, st, Limits{StepWait: 50 * time.Millisecond})
	id := create(t, w1.svc, Options{}).Session.ID
	w1.hold = true
	if _, err := w1.svc.Step(context.Background(), id, StepRequest{Turn: 0, Content: code("print(3)")}); !errors.Is(err, ErrStepTimeout) {
		t.Fatalf("held step: %v, want ErrStepTimeout", err)
	}
	w2, _ := newWorld(t, st, Limits{})
	if err := w2.svc.Load(context.Background()); err != nil || w2.svc.Live() != 1 {
		t.Fatalf("load: %v, %d live", err, w2.svc.Live())
	}
	w2.actions = w1.actions // the stream keeps the published action
	go w2.observe(w1.actions[0])
	r := step(t, w2.svc, id, 0, code("print(99)"))
	if r.Observation != "3\n" || !r.ReplyIgnored || len(w2.actions) != 1 {
		t.Fatalf("after restart: %+v, %d actions", r, len(w2.actions))
	}
}

// TestCapAndReap: the cap refuses a session beyond it; an idle session is
// reaped as abandoned (freeing its slot), a done one is deleted later.
func TestCapAndReap(t *testing.T) {
	t.Parallel()
	w, clk := newWorld(t, newMemStore(), Limits{MaxSessions: 1, IdleTimeout: time.Minute, KeepDone: time.Hour})
	id := create(t, w.svc, Options{}).Session.ID
	if _, err := w.svc.Create(context.Background(), CreateRequest{TaskID: task.ID}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("over the cap: %v, want ErrTooMany", err)
	}
	if n, err := w.svc.Reap(context.Background()); n != 0 || err != nil {
		t.Fatalf("reaped %d (%v) before the idle time", n, err)
	}
	clk.add(2 * time.Minute)
	if n, err := w.svc.Reap(context.Background()); n != 1 || err != nil {
		t.Fatalf("reaped %d (%v), want 1", n, err)
	}
	s, err := w.svc.waitScore(context.Background(), id)
	if err != nil || s.Score.Outcome != schemas.OutcomeAbandoned || s.State.Result.Termination != schemas.EndAbandoned {
		t.Fatalf("reaped session: %+v, %v", s.Score, err)
	}
	if _, err := w.svc.Step(context.Background(), id, StepRequest{Turn: 0, Content: "x"}); !errors.Is(err, ErrDone) {
		t.Fatalf("step of a reaped session: %v", err)
	}
	create(t, w.svc, Options{}) // the slot is free again
	clk.add(2 * time.Hour)
	if _, err := w.svc.Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Get(context.Background(), id); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("done session kept past KeepDone: %v", err)
	}
}

// TestCloseScores: closing an unfinished session ends it as closed, a
// scored episode (turn_limit, reward 0, truncated), not abandoned (which is
// left out of exports); closing again answers the same. Only the reaper
// abandons (TestCapAndReap).
func TestCloseScores(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t, newMemStore(), Limits{})
	id := create(t, w.svc, Options{}).Session.ID
	step(t, w.svc, id, 0, code("print(1)"))
	c, err := w.svc.Close(context.Background(), id)
	if err != nil || c.Outcome != schemas.OutcomeTurnLimit || c.Outcome.Excluded() || c.Reward != 0 || c.Row == nil {
		t.Fatalf("close: %+v, %v", c, err)
	}
	if len(w.results) != 1 || w.results[0].Termination != schemas.EndClosed || w.results[0].FinalAnswer != "" {
		t.Fatalf("closed episode sent to the verifier as %+v", w.results)
	}
	c2, err := w.svc.Close(context.Background(), id)
	if err != nil || c2.Outcome != c.Outcome || len(w.results) != 1 {
		t.Fatalf("second close: %+v, %v, %d results", c2, err, len(w.results))
	}
}

// TestDefaultGivesNoVerdict: under the default options a code run that
// prints the truth neither ends the episode nor says it is right (no
// check is asked of the verifier, no verdict, not accepted, the
// observation is the program's output only), so a guessing agent that
// prints candidates and then answers wrong scores 0; under end_on both
// the same print ends the episode with reward 1 (the oracle the default
// removes).
func TestDefaultGivesNoVerdict(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t, newMemStore(), Limits{})
	c := create(t, w.svc, Options{})
	if o := c.Session.State.Request.Options; o.EndOn != schemas.EndOnAnswer || o.ShowVerdict {
		t.Fatalf("default options %+v", o)
	}
	id := c.Session.ID
	for i, guess := range []string{"41", "42", "43"} {
		r := step(t, w.svc, id, i, code("print("+guess+")"))
		if r.Done || r.Reward != 0 || r.Info.Accepted || r.Info.Verdict != "" || r.Observation != guess+"\n" {
			t.Fatalf("guess %s: %+v", guess, r)
		}
	}
	w.mu.Lock()
	for _, a := range w.actions {
		if a.Check {
			t.Errorf("turn %d asked the verifier for a check under the default rule", a.Ref.Turn)
		}
	}
	w.mu.Unlock()
	if r := step(t, w.svc, id, 3, answerReply("43")); !r.Done || r.Reward != 0 || r.Info.Outcome != "incorrect" {
		t.Fatalf("wrong answer after the guesses: %+v", r)
	}

	both := schemas.EndOnBoth
	id = create(t, w.svc, Options{EndOn: &both}).Session.ID
	step(t, w.svc, id, 0, code("print(41)"))
	if r := step(t, w.svc, id, 1, code("print(42)")); !r.Done || r.Reward != 1 {
		t.Fatalf("end_on both: printing the truth gave %+v, want the episode ended with reward 1", r)
	}
}

// TestOptions: defaults, overrides and refusals.
func TestOptions(t *testing.T) {
	t.Parallel()
	n, on := 3, "answer"
	o, p, run, err := Options{MaxTurns: &n, EndOn: &on, Model: "m"}.resolve("r", "external", schemas.EndOnBoth)
	if err != nil || o.MaxTurns != 3 || o.EndOn != "answer" || p.Model != "m" || p.Name != schemas.PolicyOpenAI || run != "r" {
		t.Fatalf("resolve: %+v %+v %q %v", o, p, run, err)
	}
	if o, _, _, err := (Options{LabelSets: []string{"medcalcbench@v1.0"}}).resolve("r", "x", ""); err != nil || len(o.LabelSets) != 1 {
		t.Fatalf("label sets: %+v %v", o.LabelSets, err)
	}
	bad := 0
	for _, b := range []Options{{MaxTurns: &bad}, {Reward: "shaped"}, {RunID: "a.b"}, {EndOn: new(string)},
		{LabelSets: []string{"medcalcbench@v9"}}, {LabelSets: []string{"medcalcbench@v1.0", "medcalcbench@medgym-1"}},
		{LabelSets: []string{"../x"}}} {
		if _, _, _, err := b.resolve("r", "x", ""); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", b, err)
		}
	}
	// The server's default end_on (--end-on) applies to sessions that name
	// none; compat upstream still takes upstream's rule whole.
	up := schemas.CompatUpstream
	for _, c := range []struct {
		def  string
		o    Options
		want string
	}{{"", Options{}, schemas.EndOnAnswer}, {schemas.EndOnBoth, Options{}, schemas.EndOnBoth},
		{schemas.EndOnBoth, Options{EndOn: &on}, schemas.EndOnAnswer}, {schemas.EndOnBoth, Options{Compat: &up}, schemas.EndOnAccepted}} {
		if o, _, _, err := c.o.resolve("r", "x", c.def); err != nil || o.EndOn != c.want {
			t.Errorf("server default %q, options %+v: end_on %q (%v), want %q", c.def, c.o, o.EndOn, err, c.want)
		}
	}
}

// TestPromptIsCreatesOpening: Prompt answers the messages and tools a
// session opens with, under each end_on, and stores nothing.
func TestPromptIsCreatesOpening(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	w, _ := newWorld(t, store, Limits{})
	for _, endOn := range []string{schemas.EndOnBoth, schemas.EndOnAccepted} {
		opts := Options{EndOn: &endOn}
		live := w.svc.Live()
		p, err := w.svc.Prompt(CreateRequest{TaskID: task.ID, Options: opts})
		if err != nil {
			t.Fatal(err)
		}
		if w.svc.Live() != live {
			t.Fatalf("end_on %s: Prompt opened a session", endOn)
		}
		c := create(t, w.svc, opts)
		if !reflect.DeepEqual(p.Messages, c.Messages) || !reflect.DeepEqual(p.Tools, c.Tools) || p.Task.ID != task.ID {
			t.Fatalf("end_on %s: prompt %+v\nsession %+v", endOn, p, c)
		}
	}
	both, accepted := schemas.EndOnBoth, schemas.EndOnAccepted
	pb, _ := w.svc.Prompt(CreateRequest{TaskID: task.ID, Options: Options{EndOn: &both}})
	pa, _ := w.svc.Prompt(CreateRequest{TaskID: task.ID, Options: Options{EndOn: &accepted}})
	if len(pb.Tools) == len(pa.Tools) { // control: the option reaches the builder
		t.Fatalf("end_on both and accepted offer the same %d tools", len(pb.Tools))
	}
	if _, err := w.svc.Prompt(CreateRequest{TaskID: "nope"}); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("unknown task: %v", err)
	}
}

// TestStepTokenData: the token data of a step is stored in its turn as the
// llm-worker's path stores it, and junk (ids and logprobs that disagree,
// negative ids, logprobs that are no log-probability, too many ids) is
// refused before anything is played.
func TestStepTokenData(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t, newMemStore(), Limits{})
	id := create(t, w.svc, Options{}).Session.ID
	ctx := context.Background()
	nan := float32(math.NaN())
	for name, r := range map[string]StepRequest{
		"logprobs without ids": {Logprobs: []float32{-1}},
		"fewer logprobs":       {TokenIDs: []int32{1, 2}, Logprobs: []float32{-1}},
		"more logprobs":        {TokenIDs: []int32{1}, Logprobs: []float32{-1, -2}},
		"negative id":          {TokenIDs: []int32{1, -1}},
		"negative prompt id":   {PromptTokenIDs: []int32{-5}},
		"NaN logprob":          {TokenIDs: []int32{1}, Logprobs: []float32{nan}},
		"positive logprob":     {TokenIDs: []int32{1}, Logprobs: []float32{0.5}},
		"too many ids":         {TokenIDs: make([]int32, MaxCompletionTokenIDs+1)},
		"too many prompt ids":  {PromptTokenIDs: make([]int32, MaxPromptTokenIDs+1)},
		"infinite logprob":     {TokenIDs: []int32{1}, Logprobs: []float32{float32(math.Inf(-1))}},
	} {
		r.Content = code("print(1)")
		if _, err := w.svc.Step(ctx, id, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if got, _ := w.svc.Get(ctx, id); len(got.State.Turns) != 0 {
		t.Fatalf("a refused step was played: %d turns", len(got.State.Turns))
	}
	r := StepRequest{Turn: 0, Content: answerReply("42"), PromptTokenIDs: []int32{7, 8, 9}, TokenIDs: []int32{3, 4}, Logprobs: []float32{-0.5, 0}}
	if _, err := w.svc.Step(ctx, id, r); err != nil {
		t.Fatal(err)
	}
	turn := w.results[0].Turns[0]
	if !reflect.DeepEqual(turn.PromptTokenIDs, r.PromptTokenIDs) || !reflect.DeepEqual(turn.CompletionTokenIDs, r.TokenIDs) ||
		!reflect.DeepEqual(turn.CompletionLogprobs, r.Logprobs) {
		t.Fatalf("stored turn: prompt %v, completion %v, logprobs %v", turn.PromptTokenIDs, turn.CompletionTokenIDs, turn.CompletionLogprobs)
	}
}

// TestPromptModeTools: prompt_mode tools opens the episode with the tools
// prompt (no JSON reply format) and offers the task's permitted actions as
// tools, in the session's messages, its tools and the prompt endpoint
// alike; a call of an action the task does not permit is refused as in
// JSON mode; the default is JSON mode, and junk or tools under upstream
// rules is refused.
func TestPromptModeTools(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t, newMemStore(), Limits{})
	tools := schemas.PromptModeTools
	c := create(t, w.svc, Options{PromptMode: &tools})
	sys := c.Messages[0].Content
	var names []string
	for _, tool := range c.Tools {
		names = append(names, tool.Function.Name)
	}
	if !reflect.DeepEqual(names, task.PermittedActions) || strings.Contains(sys, "JSON") ||
		!strings.Contains(sys, "Each reply calls exactly one of the tools validate_code, terminal, answer") {
		t.Fatalf("tools %v, system prompt:\n%s", names, sys)
	}
	p, err := w.svc.Prompt(CreateRequest{TaskID: task.ID, Options: Options{PromptMode: &tools}})
	if err != nil || !reflect.DeepEqual(p.Messages, c.Messages) || !reflect.DeepEqual(p.Tools, c.Tools) {
		t.Fatalf("prompt endpoint differs from the session's opening: %v", err)
	}
	r := step(t, w.svc, c.Session.ID, 0, `{"action": "debug", "params": {"code": "x", "error_msg": "y"}}`)
	if r.Done || !strings.Contains(r.Observation, `"debug" is not permitted`) {
		t.Fatalf("a forbidden action: %+v", r)
	}
	def := create(t, w.svc, Options{})
	if !strings.Contains(def.Messages[0].Content, "Must be valid JSON format.") || !reflect.DeepEqual(def.Tools, c.Tools) {
		t.Fatalf("default prompt:\n%s", def.Messages[0].Content)
	}
	json, junk, up := schemas.PromptModeJSON, "xml", schemas.CompatUpstream
	if j := create(t, w.svc, Options{PromptMode: &json}); j.Messages[0].Content != def.Messages[0].Content {
		t.Fatal("prompt_mode json is not the default")
	}
	for _, o := range []Options{{PromptMode: &junk}, {PromptMode: &tools, Compat: &up}} {
		if _, err := w.svc.Create(context.Background(), CreateRequest{TaskID: task.ID, Options: o}); !errors.Is(err, ErrInvalid) {
			t.Errorf("options %+v: %v, want ErrInvalid", o, err)
		}
	}
}

// TestEpisodeTokenBudget: the token ids an episode's turns hold together
// are bounded (each step within its own caps could otherwise grow the
// session's state by the body limit every turn); the step past the budget
// is refused and not played, the same reply without token data is.
func TestEpisodeTokenBudget(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t, newMemStore(), Limits{EpisodeTokenIDs: 10})
	id := create(t, w.svc, Options{}).Session.ID
	ctx := context.Background()
	if _, err := w.svc.Step(ctx, id, StepRequest{Turn: 0, Content: "no json", PromptTokenIDs: make([]int32, 6), TokenIDs: []int32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Step(ctx, id, StepRequest{Turn: 1, Content: "no json", PromptTokenIDs: make([]int32, 2), TokenIDs: []int32{1}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("step past the budget: %v", err)
	}
	if got, _ := w.svc.Get(ctx, id); len(got.State.Turns) != 1 {
		t.Fatalf("a refused step was played: %d turns", len(got.State.Turns))
	}
	if r, err := w.svc.Step(ctx, id, StepRequest{Turn: 1, Content: "no json", TokenIDs: []int32{1, 2}}); err != nil || r.Info.Turn != 1 {
		t.Fatalf("a step within the budget: %+v, %v", r, err)
	}
}
