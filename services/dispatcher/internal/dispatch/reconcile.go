package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/medgym/medgym/schemas"
)

// Pipeline tells, from stored state, which of a run's episodes still have
// a message in play: waiting for or being handled by some worker. The
// caller reads the scores after it returns (a score is counted before its
// message is acked, so an episode that finishes while it looks is found
// scored). An error wrapping ErrInconclusive means it cannot tell now.
type Pipeline interface {
	EpisodesInPlay(ctx context.Context, runID string) (map[string]bool, error)
}

// ErrInconclusive is wrapped by a Pipeline that cannot tell which episodes
// are in play now (dead letters wait to be handled); the pass is skipped.
var ErrInconclusive = errors.New("reconciliation inconclusive")

// LostReason is the error of the infra_failure result recorded for an
// episode the reconciliation found lost.
const LostReason = "lost in the pipeline: no message of the episode is waiting or being handled and it has no score " +
	"(a message ran out of deliveries while its dead letter could not be stored, or was discarded)"

// Reconcile accounts for the episodes of the runs this dispatcher drives
// that are published, unscored and have no message in play: the
// max-deliveries dead letter that would have accounted for them is a copy
// made when JetStream's advisory is heard, and it is lost when the
// dead-letter stream cannot be written (a full store) or no dispatcher
// listens. An episode found so in two passes in a row is recorded as an
// infra_failure result (LostReason), published with the episode's result
// message id, so a real result or a dead letter's result published first
// wins. Run it at start and periodically (see ReconcileLoop).
func (d *Dispatcher) Reconcile(ctx context.Context) error {
	if d.deps.Pipeline == nil {
		return nil
	}
	d.mu.Lock()
	runs := make([]*runState, 0, len(d.active))
	for _, rs := range d.active {
		runs = append(runs, rs)
	}
	d.mu.Unlock()
	var errs []error
	for _, rs := range runs {
		if err := d.reconcileRun(ctx, rs); err != nil && !errors.Is(err, ErrInconclusive) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ReconcileLoop runs Reconcile now and then every interval until ctx is
// done; a failing pass (the store full or unreachable) is logged and
// tried again at the next.
func (d *Dispatcher) ReconcileLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := d.Reconcile(ctx); err != nil && ctx.Err() == nil {
			d.deps.Log.Warn("reconciliation failed; trying again", "err", err, "every", every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dispatcher) reconcileRun(ctx context.Context, rs *runState) error {
	p := rs.plan
	run := p.Spec.RunID
	st, _, err := d.status(ctx, run)
	if err != nil {
		return fmt.Errorf("reconcile run %s: %w", run, err)
	}
	if st.Finished || st.Error != "" || st.Cancel == schemas.CancelDrop {
		return nil // a drained run still waits for its published episodes
	}
	inPlay, err := d.deps.Pipeline.EpisodesInPlay(ctx, run)
	if err != nil {
		return fmt.Errorf("reconcile run %s: %w", run, err)
	}
	// The scores are read after the messages: see Pipeline.
	var lost []int
	for c := range Chunks(st.Published) {
		chunk, _, err := d.done.store.Get(ctx, ChunkKey(run, c))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("reconcile run %s: read completions: %w", run, err)
		}
		for i := c * ChunkBits; i < min(st.Published, (c+1)*ChunkBits); i++ {
			if Marked(chunk, i) {
				continue
			}
			ti, k := p.Episode(i)
			if !inPlay[EpisodeID(run, p.tasks[ti].ID, k)] {
				lost = append(lost, i)
			}
		}
	}
	d.mu.Lock()
	before := d.suspects[run]
	now := make(map[int]bool, len(lost))
	var confirmed []int
	for _, i := range lost {
		now[i] = true
		if before[i] {
			confirmed = append(confirmed, i)
		}
	}
	d.suspects[run] = now
	if d.recorded[run] == nil {
		d.recorded[run] = map[int]bool{}
	}
	recorded := d.recorded[run]
	d.mu.Unlock()
	for _, i := range confirmed {
		req := p.Request(i, time.Now().UTC())
		res := schemas.EpisodeResult{Request: req, Termination: schemas.EndInfraFailure, Error: LostReason,
			StartedAt: req.RequestedAt, FinishedAt: req.RequestedAt}
		if err := d.deps.Publish(ctx, schemas.EpisodeCompleted.For(run), schemas.ResultMsgID(req.EpisodeID), res); err != nil {
			return fmt.Errorf("reconcile run %s: record lost episode %s: %w", run, req.EpisodeID, err)
		}
		// Still lost after its record: publish it again (its result id may
		// have been taken by a result lost too; JetStream's dedupe drops
		// the repeats), but count and log it once.
		d.mu.Lock()
		again := recorded[i]
		recorded[i] = true
		d.mu.Unlock()
		if again {
			continue
		}
		d.deps.Log.Warn("episode lost in the pipeline: recording infra_failure", "run", run, "episode", req.EpisodeID)
		if d.deps.Lost != nil {
			d.deps.Lost()
		}
	}
	return nil
}
