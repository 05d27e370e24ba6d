package episode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
)

// replies is a policy that answers the n-th call with fn(n, msgs) and
// records the largest conversation it was sent.
type replies struct {
	fn      func(n int, msgs []schemas.ChatMessage) string
	calls   int
	largest int
}

func (r *replies) Complete(_ context.Context, _ schemas.EpisodeRequest, msgs []schemas.ChatMessage) (episode.Completion, error) {
	r.largest = max(r.largest, agent.ConversationBytes(msgs))
	r.calls++
	text := r.fn(r.calls-1, msgs)
	return episode.Completion{Text: text, Reasoning: strings.Repeat("r", len(text)), TokenIDs: []int32{1, 2}, Logprobs: []float32{-1, -1}}, nil
}

// TestLongReplyIsAFormatError: a reply at agent.MaxReplyBytes is parsed as
// usual; one over it (here 20 MB of `{"a":`) is a format error turn whose
// stored raw text, reasoning and conversation message are capped (head,
// tail, the full size in the marker and the parse error), without token
// data; the episode goes on.
func TestLongReplyIsAFormatError(t *testing.T) {
	t.Parallel()
	atCap := code("print(1)" + strings.Repeat(" ", agent.MaxReplyBytes-len(code("print(1)"))))
	if len(atCap) != agent.MaxReplyBytes {
		t.Fatalf("reply at the cap is %d bytes", len(atCap))
	}
	huge := strings.Repeat(`{"a":`, 4<<20)
	pol := &replies{fn: func(n int, _ []schemas.ChatMessage) string {
		return []string{huge, atCap, answer("1")}[min(n, 2)]
	}}
	st, _ := play(t, engine(pol), request(nil), printed("1"))
	r := st.Result
	if r.Termination != schemas.EndAnswered || len(r.Turns) != 3 {
		t.Fatalf("%s after %d turns, want answered after 3", r.Termination, len(r.Turns))
	}
	t0 := r.Turns[0]
	if !strings.Contains(t0.ParseError, agent.ErrReplyTooLong.Error()) || !strings.Contains(t0.ParseError, fmt.Sprint(len(huge))) {
		t.Errorf("turn 0 parse error %q: want reply too long with its size %d", t0.ParseError, len(huge))
	}
	for _, k := range []struct{ name, kept, head string }{
		{"raw text", t0.RawText, huge[:100]}, {"message", r.Messages[2].Content, huge[:100]}, {"reasoning", t0.Reasoning, "rrrr"},
	} {
		if len(k.kept) > agent.MaxReplyBytes+200 || !strings.HasPrefix(k.kept, k.head) || !strings.Contains(k.kept, fmt.Sprintf("was %d bytes", len(huge))) {
			t.Errorf("%s: %d bytes kept; want at most the cap, with the head and the full size", k.name, len(k.kept))
		}
	}
	if t0.CompletionTokenIDs != nil || t0.CompletionLogprobs != nil {
		t.Error("a capped reply kept its token data")
	}
	if t1 := r.Turns[1]; t1.ParseError != "" || t1.RawText != atCap || t1.CompletionTokenIDs == nil {
		t.Errorf("the reply at the cap: parse error %q, %d bytes kept", t1.ParseError, len(t1.RawText))
	}
}

// TestConversationCap: the conversation sent to the model may reach
// agent.MaxConversationBytes exactly; once a turn takes it over, the
// episode ends at the turn limit as a context overflow (no answer, though
// nothing was ever sent over the cap).
func TestConversationCap(t *testing.T) {
	t.Parallel()
	obs := len(agent.ParseErrorMessage(agent.ErrNoJSON))
	sawCap := false
	pol := &replies{fn: func(_ int, msgs []schemas.ChatMessage) string {
		left := agent.MaxConversationBytes - agent.ConversationBytes(msgs)
		if left == 0 {
			sawCap = true
			return "x" // one byte over, with its observation
		}
		return strings.Repeat("x", min(agent.MaxReplyBytes, left-obs)) // no JSON: a parse error
	}}
	req := request(func(o *schemas.EpisodeOptions) { o.MaxTurns = 200 })
	st, _ := play(t, engine(pol), req, printed("1"))
	r := st.Result
	if r.Termination != schemas.EndTurnLimit || r.FinalAnswer != "" || !strings.Contains(r.Error, "context overflow") {
		t.Fatalf("%s %q (%s); want turn_limit, no answer, context overflow", r.Termination, r.FinalAnswer, r.Error)
	}
	if !sawCap || pol.largest != agent.MaxConversationBytes {
		t.Fatalf("largest conversation sent %d bytes (reached the cap: %v); want exactly %d", pol.largest, sawCap, agent.MaxConversationBytes)
	}
}

// blocking is a policy that waits for its context, then fails with wrap
// around the context's error.
type blocking struct {
	wrap        error
	hadDeadline bool
}

func (b *blocking) Complete(ctx context.Context, _ schemas.EpisodeRequest, _ []schemas.ChatMessage) (episode.Completion, error) {
	_, b.hadDeadline = ctx.Deadline()
	<-ctx.Done()
	if b.wrap != nil {
		return episode.Completion{}, fmt.Errorf("%w: status 503 until the deadline: %w", b.wrap, ctx.Err())
	}
	return episode.Completion{}, ctx.Err()
}

// TestClockCancelsTheModelCall: the episode's clock (its options', else
// the engine's DefaultTimeout) cancels a model call that hangs, and the
// episode ends as a timeout, an agent outcome; when the endpoint was
// failing (ErrUnavailable) as the clock ran out, it is an infrastructure
// failure.
func TestClockCancelsTheModelCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  int           // EpisodeTimeoutSec
		def  time.Duration // Engine.DefaultTimeout
		wrap error
		want schemas.Termination
	}{
		{"hanging model, options' clock", 1, 0, nil, schemas.EndTimeout},
		{"hanging model, default clock", 0, 50 * time.Millisecond, nil, schemas.EndTimeout},
		{"endpoint down", 0, 50 * time.Millisecond, episode.ErrUnavailable, schemas.EndInfraFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pol := &blocking{wrap: tc.wrap}
			e := engine(pol)
			e.Now, e.DefaultTimeout = time.Now, tc.def
			st, step, err := e.Start(t.Context(), request(func(o *schemas.EpisodeOptions) { o.EpisodeTimeoutSec = tc.opt }))
			if err != nil || step.Result == nil {
				t.Fatalf("step %+v, err %v", step, err)
			}
			if !pol.hadDeadline || st.Result.Termination != tc.want {
				t.Fatalf("deadline on the call %v, ended %s (%s); want %s", pol.hadDeadline, st.Result.Termination, st.Result.Error, tc.want)
			}
		})
	}
}

// TestContextOverflowIsTurnLimit: a policy that says the conversation no
// longer fits the model (a vLLM 400 on the context length) ends the episode
// at the turn limit with no answer, not as an infrastructure failure.
func TestContextOverflowIsTurnLimit(t *testing.T) {
	t.Parallel()
	calls := 0
	pol := policyFunc(func() (episode.Completion, error) {
		calls++
		if calls == 1 {
			return episode.Completion{Text: code("print(1)")}, nil
		}
		return episode.Completion{}, fmt.Errorf("%w: status 400: maximum context length is 4096 tokens", episode.ErrContextOverflow)
	})
	st, _ := play(t, engine(pol), request(nil), printed("2"))
	r := st.Result
	if r.Termination != schemas.EndTurnLimit || r.FinalAnswer != "" || !strings.Contains(r.Error, "context overflow") || len(r.Turns) != 1 {
		t.Fatalf("%s %q (%s) after %d turns; want turn_limit without an answer", r.Termination, r.FinalAnswer, r.Error, len(r.Turns))
	}
}

type policyFunc func() (episode.Completion, error)

func (f policyFunc) Complete(context.Context, schemas.EpisodeRequest, []schemas.ChatMessage) (episode.Completion, error) {
	return f()
}
