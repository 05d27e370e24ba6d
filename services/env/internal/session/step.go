package session

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
)

// StepRequest is one model reply. Content is the reply text (tool calls
// re-serialised by agent.ToolCallReply); the rest is recorded in the turn.
type StepRequest struct {
	Turn                           int
	Content                        string
	Reasoning, FinishReason        string
	TokenIDs, PromptTokenIDs       []int32
	Logprobs                       []float32
	PromptTokens, CompletionTokens int
}

// The bounds on a step's token data: a completion's ids (and logprobs)
// and the prompt's ids the client's engine generated from.
const (
	MaxCompletionTokenIDs = 1 << 16
	MaxPromptTokenIDs     = 1 << 18
)

// validate refuses token data the store could not keep as the llm-worker's
// path keeps it: negative ids, logprobs without their ids or of another
// length, logprobs that are not finite or above 0, too many ids.
func (r StepRequest) validate() error {
	switch {
	case len(r.TokenIDs) > MaxCompletionTokenIDs:
		return fmt.Errorf("%w: token_ids: %d ids, at most %d", ErrInvalid, len(r.TokenIDs), MaxCompletionTokenIDs)
	case len(r.PromptTokenIDs) > MaxPromptTokenIDs:
		return fmt.Errorf("%w: prompt_token_ids: %d ids, at most %d", ErrInvalid, len(r.PromptTokenIDs), MaxPromptTokenIDs)
	case len(r.Logprobs) > 0 && len(r.Logprobs) != len(r.TokenIDs):
		return fmt.Errorf("%w: logprobs: %d values for %d token_ids (one per completion token)", ErrInvalid, len(r.Logprobs), len(r.TokenIDs))
	}
	for name, ids := range map[string][]int32{"token_ids": r.TokenIDs, "prompt_token_ids": r.PromptTokenIDs} {
		for i, id := range ids {
			if id < 0 {
				return fmt.Errorf("%w: %s[%d] is %d (token ids are ≥ 0)", ErrInvalid, name, i, id)
			}
		}
	}
	for i, lp := range r.Logprobs {
		if v := float64(lp); math.IsNaN(v) || math.IsInf(v, 0) || v > 0 {
			return fmt.Errorf("%w: logprobs[%d] is %v (log-probabilities are finite and ≤ 0)", ErrInvalid, i, lp)
		}
	}
	return nil
}

// tokenIDs counts the token ids turns hold.
func tokenIDs(turns []schemas.Turn) int {
	n := 0
	for _, t := range turns {
		n += len(t.PromptTokenIDs) + len(t.CompletionTokenIDs)
	}
	return n
}

// maxConflicts bounds the compare-and-set retries of one change (another
// request or handler saved the session in between).
const maxConflicts = 8

// Step plays one reply: a turn already answered returns its stored answer,
// the expected turn is executed (once, whoever asks), a later one is a
// TurnError, and any turn past the end is ErrDone. An answer to a reply
// that is not the one its turn was played with is marked ReplyIgnored.
func (s *Service) Step(ctx context.Context, id string, r StepRequest) (StepResult, error) {
	res, played, err := s.step(ctx, id, r)
	if err == nil && played != nil && played.RawText != r.Content {
		res.ReplyIgnored = true
	}
	return res, err
}

// step is Step; played is the turn as stored when the request did not play
// it (a retry), nil when it did.
func (s *Service) step(ctx context.Context, id string, r StepRequest) (StepResult, *schemas.Turn, error) {
	for range maxConflicts {
		sess, rev, err := s.load(ctx, id)
		if err != nil {
			return StepResult{}, nil, err
		}
		// Checked once the session is known: an unknown one is a 404
		// whatever the body holds.
		if err := r.validate(); err != nil {
			return StepResult{}, nil, err
		}
		k := len(sess.Steps)
		var played *schemas.Turn
		if r.Turn >= 0 && r.Turn < len(sess.State.Turns) {
			played = &sess.State.Turns[r.Turn]
		}
		switch {
		case r.Turn < 0:
			return StepResult{}, nil, fmt.Errorf("%w: turn %d is negative", ErrInvalid, r.Turn)
		case r.Turn < k:
			return sess.Steps[r.Turn], played, nil
		case sess.Score != nil:
			return StepResult{}, nil, fmt.Errorf("%w: the episode ended (%s) after %d steps; step turns 0..%d return their stored answers",
				ErrDone, sess.Score.Outcome, k, k-1)
		case r.Turn > k:
			return StepResult{}, nil, &TurnError{Got: r.Turn, Want: k}
		case sess.State.PendingAction != nil || sess.State.Result != nil:
			// This turn is executing (a retry, or a step whose answer was
			// lost): re-publish what is pending (dropped as a duplicate
			// if it was published) and wait for the answer.
			if err := s.publish(ctx, episode.Step{Action: sess.State.PendingAction, Result: sess.State.Result}); err != nil {
				return StepResult{}, nil, err
			}
			res, err := s.wait(ctx, id, r.Turn)
			return res, played, err
		}
		if n := tokenIDs(sess.State.Turns) + len(r.PromptTokenIDs) + len(r.TokenIDs); n > s.limits.EpisodeTokenIDs {
			return StepResult{}, nil, fmt.Errorf("%w: the episode's turns would hold %d token ids, at most %d (send this step without them)",
				ErrInvalid, n, s.limits.EpisodeTokenIDs)
		}
		reply := episode.Completion{Text: r.Content, Reasoning: r.Reasoning, FinishReason: r.FinishReason,
			PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
			PromptTokenIDs: r.PromptTokenIDs, TokenIDs: r.TokenIDs, Logprobs: r.Logprobs}
		next, step, err := s.engine(&reply).Resume(ctx, sess.State)
		if err != nil {
			return StepResult{}, nil, fmt.Errorf("step %d of session %s: %w", r.Turn, id, err)
		}
		sess.State, sess.LastSeen = next, s.deps.Now()
		switch {
		case step.Result != nil:
			f := answer(sess, r.Turn, nil)
			sess.Final = &f
		case step.Action == nil:
			sess.Steps = append(sess.Steps, answer(sess, r.Turn, nil))
		}
		if _, err := s.deps.Store.Update(ctx, sess, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return StepResult{}, nil, fmt.Errorf("save session %s (turn %d): %w", id, r.Turn, err)
		}
		if step.Action == nil && step.Result == nil {
			return sess.Steps[r.Turn], nil, nil
		}
		if err := s.publish(ctx, step); err != nil {
			return StepResult{}, nil, err
		}
		res, err := s.wait(ctx, id, r.Turn)
		return res, nil, err
	}
	return StepResult{}, nil, fmt.Errorf("step %d of session %s: %w (%d times)", r.Turn, id, ErrConflict, maxConflicts)
}

// answer is the step answer of turn (before any score).
func answer(sess Session, turn int, check *schemas.Check) StepResult {
	res := StepResult{Info: StepInfo{Turn: turn}}
	if turn < len(sess.State.Turns) {
		t := sess.State.Turns[turn]
		res.Observation = t.Observation
		res.Info.Action, res.Info.ParseError, res.Info.ExecStatus, res.Info.Accepted = t.ActionName, t.ParseError, t.ExecStatus, t.Accepted
	}
	// The verdict is shown only where the model is shown it (its text never
	// holds the gold value: ADR 0008).
	if check != nil && sess.State.Request.Options.ShowVerdict {
		res.Info.Verdict = check.Verdict
	}
	return res
}

func (s *Service) publish(ctx context.Context, step episode.Step) error {
	switch {
	case step.Action != nil:
		a := step.Action
		if err := s.deps.Publish(ctx, schemas.ActionRequested.For(a.Ref.RunID), schemas.MsgID(a.Ref.EpisodeID, a.Ref.Turn, "action"), *a); err != nil {
			return fmt.Errorf("publish action %s/%d: %w", a.Ref.EpisodeID, a.Ref.Turn, err)
		}
	case step.Result != nil:
		r := step.Result
		if err := s.deps.Publish(ctx, schemas.EpisodeCompleted.For(r.Request.RunID), schemas.ResultMsgID(r.Request.EpisodeID), *r); err != nil {
			return fmt.Errorf("publish result %s: %w", r.Request.EpisodeID, err)
		}
	}
	return nil
}

// pollEvery is how often a waiting step re-reads its session, for changes
// made by another process (those of this one wake it at once).
const pollEvery = time.Second

// wait returns the answer of turn once it is stored.
func (s *Service) wait(ctx context.Context, id string, turn int) (StepResult, error) {
	deadline := time.NewTimer(s.limits.StepWait)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ch, stop := s.watch(id)
		sess, _, err := s.load(ctx, id)
		if err != nil {
			stop()
			return StepResult{}, err
		}
		if sess.Score != nil {
			// The score is stored: the session is no longer live, even if
			// this step read it before Scored cleared the count.
			s.setLive(id, false)
		}
		if turn < len(sess.Steps) {
			stop()
			return sess.Steps[turn], nil
		}
		if sess.Score != nil {
			stop()
			return StepResult{}, fmt.Errorf("%w: the episode ended (%s) before turn %d was answered", ErrDone, sess.Score.Outcome, turn)
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-deadline.C:
			stop()
			return StepResult{}, fmt.Errorf("%w: turn %d of session %s is still executing after %s; retry the step with the same turn for its answer",
				ErrStepTimeout, turn, id, s.limits.StepWait)
		case <-ctx.Done():
			stop()
			return StepResult{}, ctx.Err()
		}
		stop()
	}
}

// Observe folds a checked observation into its session (the llm-worker's
// Observe): the episode then waits for the next reply, whose step gets
// this answer, or ends and is sent to the verifier. A redelivered
// observation changes nothing. ErrUnknownEpisode: not a session's.
func (s *Service) Observe(ctx context.Context, obs schemas.Observation) error {
	id, err := s.byEpisode(ctx, obs.Ref.EpisodeID)
	if err != nil {
		return err
	}
	for range maxConflicts {
		sess, rev, err := s.load(ctx, id)
		if errors.Is(err, ErrUnknownSession) {
			return fmt.Errorf("%w: session %s of episode %s is gone", ErrUnknownEpisode, id, obs.Ref.EpisodeID)
		}
		if err != nil {
			return err
		}
		next, step, err := s.engine(nil).Continue(ctx, sess.State, obs)
		if errors.Is(err, episode.ErrStale) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("observation %s/%d: %w", obs.Ref.EpisodeID, obs.Ref.Turn, err)
		}
		sess.State = next
		if step.Result != nil {
			f := answer(sess, obs.Ref.Turn, obs.Check)
			sess.Final = &f
		} else {
			sess.Steps = append(sess.Steps, answer(sess, obs.Ref.Turn, obs.Check))
		}
		if _, err := s.deps.Store.Update(ctx, sess, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return fmt.Errorf("save session %s (turn %d): %w", id, obs.Ref.Turn, err)
		}
		if err := s.publish(ctx, step); err != nil {
			return err
		}
		s.notify(id)
		return nil
	}
	return fmt.Errorf("observation %s/%d: %w", obs.Ref.EpisodeID, obs.Ref.Turn, ErrConflict)
}

// Scored records the verifier's score: the ending step's answer gets its
// reward and outcome. ErrUnknownEpisode: not a session's episode, or one
// this server never finished.
func (s *Service) Scored(ctx context.Context, sc schemas.Score) error {
	id, err := s.byEpisode(ctx, sc.EpisodeID)
	if err != nil {
		return err
	}
	for range maxConflicts {
		sess, rev, err := s.load(ctx, id)
		if errors.Is(err, ErrUnknownSession) {
			return nil // deleted after it was scored: a redelivery
		}
		if err != nil {
			return err
		}
		if sess.Score != nil {
			return nil
		}
		if sess.State.Result == nil || sc.RunID != sess.State.Request.RunID {
			return fmt.Errorf("%w: score of episode %s, which this server has not finished", ErrUnknownEpisode, sc.EpisodeID)
		}
		sc := sc
		sess.Score = &sc
		if f := sess.Final; f != nil {
			done := *f
			done.Reward, done.Done = sc.Reward, true
			t := sess.State.Result.Termination
			done.Truncated = t == schemas.EndTurnLimit || t == schemas.EndTimeout || t == schemas.EndClosed
			done.Info.Outcome, done.Info.Termination, done.Info.Row = string(sc.Outcome), string(t), rowOf(sc)
			sess.Steps = append(sess.Steps, done)
			sess.Final = nil
		}
		if _, err := s.deps.Store.Update(ctx, sess, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return fmt.Errorf("save session %s (score): %w", id, err)
		}
		s.setLive(id, false)
		s.notify(id)
		return nil
	}
	return fmt.Errorf("score of %s: %w", sc.EpisodeID, ErrConflict)
}

func (s *Service) byEpisode(ctx context.Context, episodeID string) (string, error) {
	id, err := s.deps.Store.ByEpisode(ctx, episodeID)
	if errors.Is(err, ErrNotFound) {
		return "", fmt.Errorf("%w: episode %s", ErrUnknownEpisode, episodeID)
	}
	if err != nil {
		return "", fmt.Errorf("look up episode %s: %w", episodeID, err)
	}
	return id, nil
}

// Closed is what closing a session answers.
type Closed struct {
	Session Session
	Outcome schemas.Outcome
	Reward  float64
	Row     *Row
}

// Close ends a session: one not yet done ends as closed (the client cut it
// short, e.g. at its own turn limit), a scored episode (turn_limit,
// nothing graded) kept in exports like any; a done one answers its score
// again. It waits for the score. Only the reaper stores an episode as
// abandoned: a client that closes its session did not vanish.
func (s *Service) Close(ctx context.Context, id string) (Closed, error) {
	if err := s.end(ctx, id, schemas.EndClosed, "closed by the client before the episode ended", 0); err != nil {
		return Closed{}, err
	}
	sess, err := s.waitScore(ctx, id)
	if err != nil {
		return Closed{}, err
	}
	return Closed{Session: sess, Outcome: sess.Score.Outcome, Reward: sess.Score.Reward, Row: rowOf(*sess.Score)}, nil
}

// end ends the episode of a session not yet done with termination why
// (closed or abandoned) and sends it to the verifier; a done one's result
// is re-published (a no-op when it was). idle > 0 ends only a session
// untouched for that long.
func (s *Service) end(ctx context.Context, id string, why schemas.Termination, msg string, idle time.Duration) error {
	for range maxConflicts {
		sess, rev, err := s.load(ctx, id)
		if err != nil {
			return err
		}
		if sess.Score != nil {
			return nil
		}
		if sess.State.Result == nil {
			if idle > 0 && s.deps.Now().Sub(sess.LastSeen) < idle {
				return nil
			}
			st := sess.State
			res := schemas.EpisodeResult{Request: st.Request, Turns: st.Turns, Messages: st.Messages,
				Termination: why, Error: msg, StartedAt: st.StartedAt, FinishedAt: s.deps.Now(), Worker: s.deps.Worker}
			sess.State.PendingAction, sess.State.Result, sess.Final = nil, &res, nil
			if _, err := s.deps.Store.Update(ctx, sess, rev); errors.Is(err, ErrConflict) {
				continue
			} else if err != nil {
				return fmt.Errorf("save session %s (%s): %w", id, why, err)
			}
			s.notify(id)
		}
		return s.publish(ctx, episode.Step{Result: sess.State.Result})
	}
	return fmt.Errorf("end session %s (%s): %w", id, why, ErrConflict)
}

func (s *Service) waitScore(ctx context.Context, id string) (Session, error) {
	deadline := time.NewTimer(s.limits.StepWait)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ch, stop := s.watch(id)
		sess, _, err := s.load(ctx, id)
		if err != nil || sess.Score != nil {
			stop()
			return sess, err
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-deadline.C:
			stop()
			return sess, fmt.Errorf("%w: session %s is not scored after %s; retry", ErrStepTimeout, id, s.limits.StepWait)
		case <-ctx.Done():
			stop()
			return sess, ctx.Err()
		}
		stop()
	}
}

// Reap abandons the live sessions idle for longer than IdleTimeout (a
// session executing a step gets its action's timeout on top), re-publishes
// the results of episodes still waiting for a score, and deletes the done
// sessions unused for KeepDone. It returns how many it abandoned.
func (s *Service) Reap(ctx context.Context) (int, error) {
	ids, err := s.deps.Store.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("list sessions: %w", err)
	}
	n := 0
	now := s.deps.Now()
	for _, id := range ids {
		sess, _, err := s.deps.Store.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("load session %s: %w", id, err)
		}
		idle := now.Sub(sess.LastSeen)
		switch {
		case sess.Score != nil:
			if s.limits.KeepDone > 0 && idle > s.limits.KeepDone {
				if err := s.deps.Store.Delete(ctx, sess); err != nil && !errors.Is(err, ErrNotFound) {
					return n, fmt.Errorf("delete session %s: %w", id, err)
				}
			}
			s.setLive(id, false)
		case sess.State.Result != nil:
			if err := s.publish(ctx, episode.Step{Result: sess.State.Result}); err != nil {
				return n, err
			}
		case s.limits.IdleTimeout > 0:
			limit := s.limits.IdleTimeout
			if p := sess.State.PendingAction; p != nil {
				limit += time.Duration(p.TimeoutSec) * time.Second
			}
			if idle <= limit {
				continue
			}
			if err := s.end(ctx, id, schemas.EndAbandoned, fmt.Sprintf("reaped: no request from the client for %s", idle.Round(time.Second)), limit); err != nil {
				return n, err
			}
			s.deps.Log.Info("session reaped", "session", id, "episode", sess.State.Request.EpisodeID, "idle", idle.Round(time.Second))
			n++
		}
	}
	return n, nil
}
