package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
)

var (
	// ErrNotFound: the StateStore has no state for the episode.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a create found the episode's state, or an update found
	// a newer revision than the one read.
	ErrConflict = errors.New("revision conflict")
	// ErrUnknownEpisode: an observation for an episode no worker started.
	ErrUnknownEpisode = errors.New("unknown episode")
	// ErrDropped: a request of a run cancelled with --drop; the episode is
	// not started.
	ErrDropped = errors.New("run dropped")
)

// DroppedMessage is the error an episode stopped by its run's drop is
// stored with (an infra_failure: excluded from training, not the agent's
// doing).
const DroppedMessage = "cancelled: the run was cancelled with medgym cancel --drop; the episode stopped at a turn boundary"

// StateStore keeps one schemas.EpisodeState per episode id. Get fails with
// ErrNotFound; Create with ErrConflict when the state exists; Update with
// ErrConflict when the state moved on since rev.
type StateStore interface {
	Get(ctx context.Context, episodeID string) (schemas.EpisodeState, uint64, error)
	Create(ctx context.Context, st schemas.EpisodeState) error
	Update(ctx context.Context, st schemas.EpisodeState, rev uint64) error
}

// PublishFunc publishes v on subject, deduplicated by msgID.
type PublishFunc func(ctx context.Context, subject, msgID string, v schemas.Validator) error

// Worker steps episodes.
type Worker struct {
	States  StateStore
	Publish PublishFunc
	// Admit, when set, refuses messages of runs or episodes the dispatcher
	// did not plan; its error is returned as is.
	Admit func(ctx context.Context, c schemas.EpisodeClaim) error
	// Dropped, when set, says whether a run was cancelled with --drop:
	// its requests are not started (ErrDropped) and its episodes stop at
	// their next observation (episode.Engine.Stop).
	Dropped func(ctx context.Context, runID string) (bool, error)
	Engine  *episode.Engine
}

// Start begins the requested episode, or, for a redelivered request whose
// episode already began, re-publishes what is pending.
func (w *Worker) Start(ctx context.Context, req schemas.EpisodeRequest) error {
	if err := w.admit(ctx, schemas.ClaimOf(req)); err != nil {
		return err
	}
	if st, _, err := w.load(ctx, req.EpisodeID); err == nil {
		return w.publish(ctx, st, pending(st))
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	if dropped, err := w.dropped(ctx, req.RunID); err != nil {
		return err
	} else if dropped {
		return fmt.Errorf("%w: episode %s of run %s not started", ErrDropped, req.EpisodeID, req.RunID)
	}
	st, step, err := w.Engine.Start(ctx, req)
	if err != nil {
		return err
	}
	if err := w.States.Create(ctx, st); err != nil {
		return fmt.Errorf("save episode %s (turn %d): %w", req.EpisodeID, len(st.Turns), err)
	}
	return w.publish(ctx, st, step)
}

// Observe folds an observation into its episode and publishes the next
// step; a stale (redelivered) observation re-publishes the pending one.
func (w *Worker) Observe(ctx context.Context, obs schemas.Observation) error {
	if err := w.admit(ctx, schemas.ClaimOfRef(obs.Ref)); err != nil {
		return err
	}
	st, rev, err := w.load(ctx, obs.Ref.EpisodeID)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: observation for episode %s, which no worker started", ErrUnknownEpisode, obs.Ref.EpisodeID)
	}
	if err != nil {
		return err
	}
	var next schemas.EpisodeState
	var step episode.Step
	if dropped, derr := w.dropped(ctx, st.Request.RunID); derr != nil {
		return derr
	} else if dropped {
		next, step, err = w.Engine.Stop(st, obs, DroppedMessage)
	} else {
		next, step, err = w.Engine.Continue(ctx, st, obs)
	}
	if errors.Is(err, episode.ErrStale) {
		return w.publish(ctx, st, pending(st))
	}
	if err != nil {
		return err
	}
	if err := w.States.Update(ctx, next, rev); err != nil {
		return fmt.Errorf("save episode %s (turn %d): %w", next.Request.EpisodeID, len(next.Turns), err)
	}
	return w.publish(ctx, next, step)
}

func (w *Worker) admit(ctx context.Context, c schemas.EpisodeClaim) error {
	if w.Admit == nil {
		return nil
	}
	return w.Admit(ctx, c)
}

func (w *Worker) dropped(ctx context.Context, runID string) (bool, error) {
	if w.Dropped == nil {
		return false, nil
	}
	return w.Dropped(ctx, runID)
}

func (w *Worker) load(ctx context.Context, id string) (schemas.EpisodeState, uint64, error) {
	st, rev, err := w.States.Get(ctx, id)
	if err != nil {
		return st, 0, fmt.Errorf("load episode %s: %w", id, err)
	}
	return st, rev, nil
}

// pending is the step a saved state is waiting on: its pending action, or
// its result once finished.
func pending(st schemas.EpisodeState) episode.Step {
	return episode.Step{Action: st.PendingAction, Result: st.Result}
}

func (w *Worker) publish(ctx context.Context, st schemas.EpisodeState, step episode.Step) error {
	run := st.Request.RunID
	switch {
	case step.Action != nil:
		return w.Publish(ctx, schemas.ActionRequested.For(run),
			schemas.MsgID(step.Action.Ref.EpisodeID, step.Action.Ref.Turn, "action"), *step.Action)
	case step.Result != nil:
		return w.Publish(ctx, schemas.EpisodeCompleted.For(run),
			schemas.ResultMsgID(step.Result.Request.EpisodeID), *step.Result)
	}
	return nil
}
