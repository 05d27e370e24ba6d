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
// ErrConflict when the state moved on since rev. Create and Update return
// the saved state's revision.
type StateStore interface {
	Get(ctx context.Context, episodeID string) (schemas.EpisodeState, uint64, error)
	Create(ctx context.Context, st schemas.EpisodeState) (uint64, error)
	Update(ctx context.Context, st schemas.EpisodeState, rev uint64) (uint64, error)
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

	// saved holds the state this worker saved last for each episode it
	// steps, so the episode's next observation skips the bucket read.
	saved savedStates
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
	rev, err := w.States.Create(ctx, st)
	if err != nil {
		return fmt.Errorf("save episode %s (turn %d): %w", req.EpisodeID, len(st.Turns), err)
	}
	w.saved.put(st, rev)
	return w.publish(ctx, st, step)
}

// Observe folds an observation into its episode and publishes the next
// step; a stale (redelivered) observation re-publishes the pending one.
func (w *Worker) Observe(ctx context.Context, obs schemas.Observation) error {
	if err := w.admit(ctx, schemas.ClaimOfRef(obs.Ref)); err != nil {
		return err
	}
	// The state this worker saved last, if it has it: the bucket is not
	// read. If another worker moved the episode on since, the save below
	// fails with ErrConflict, as it would after a read. Stale against it,
	// the observation is decided on the bucket's state (the episode may
	// have moved on elsewhere, and a stale observation re-publishes what
	// is pending there).
	if st, rev, ok := w.saved.take(obs.Ref.EpisodeID); ok {
		next, step, err := w.next(ctx, st, obs)
		if !errors.Is(err, episode.ErrStale) {
			return w.save(ctx, next, step, rev, err)
		}
	}
	st, rev, err := w.load(ctx, obs.Ref.EpisodeID)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: observation for episode %s, which no worker started", ErrUnknownEpisode, obs.Ref.EpisodeID)
	}
	if err != nil {
		return err
	}
	next, step, err := w.next(ctx, st, obs)
	if errors.Is(err, episode.ErrStale) {
		return w.publish(ctx, st, pending(st))
	}
	return w.save(ctx, next, step, rev, err)
}

// next folds obs into st and takes the next step, or ends the episode
// when its run was cancelled with --drop.
func (w *Worker) next(ctx context.Context, st schemas.EpisodeState, obs schemas.Observation) (schemas.EpisodeState, episode.Step, error) {
	dropped, err := w.dropped(ctx, st.Request.RunID)
	if err != nil {
		return st, episode.Step{}, err
	}
	if dropped {
		return w.Engine.Stop(st, obs, DroppedMessage)
	}
	return w.Engine.Continue(ctx, st, obs)
}

// save stores the next state over revision rev and publishes its step;
// err is Continue's.
func (w *Worker) save(ctx context.Context, next schemas.EpisodeState, step episode.Step, rev uint64, err error) error {
	if err != nil {
		return err
	}
	nrev, err := w.States.Update(ctx, next, rev)
	if err != nil {
		return fmt.Errorf("save episode %s (turn %d): %w", next.Request.EpisodeID, len(next.Turns), err)
	}
	w.saved.put(next, nrev)
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
