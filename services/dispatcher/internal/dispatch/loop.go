package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/medgym/medgym/schemas"
)

// defaultRunInFlight is a run's max_in_flight when its spec leaves it 0.
const defaultRunInFlight = 64

// maxRetryWait caps the wait between a loop's attempts while the stores
// are unreachable; the loop itself never gives up.
const maxRetryWait = 5 * time.Second

// loop is a run's admission control: publish while fewer than MaxInFlight
// published episodes are unscored, and fewer than the run's fair share of
// the dispatcher's MaxInFlightTotal (see admission); finish when every planned episode is
// published and scored, or when the run is cancelled. The scored episodes
// are the bits set in the completions bucket, so only validated, distinct,
// planned episode ids count (see Scored). A failing store or publish (the
// NATS server is down or restarting) is retried with a backoff, forever: the
// loop ends only when the run is finished or the service stops.
func (d *Dispatcher) loop(ctx context.Context, stop <-chan struct{}, rs *runState) {
	p := rs.plan
	run := p.Spec.RunID
	maxIn := p.Spec.MaxInFlight
	if maxIn <= 0 {
		maxIn = defaultRunInFlight
	}
	prog := newProgress(p.Len())
	tick := time.NewTicker(d.cfg.Tick)
	defer tick.Stop()
	var failing error // the error of the last attempt, until one succeeds
	failures := 0
	for {
		err := d.step(ctx, rs, prog, maxIn)
		switch {
		case errors.Is(err, errRunOver):
			return
		case errors.Is(err, errConflict):
			continue // another writer moved the status on: re-read now
		case err != nil:
			if failing == nil {
				d.deps.Log.Warn("run loop: NATS operation failed; retrying until it succeeds", "run", run, "err", err)
			}
			failing = err
			failures++
			wait := min(maxRetryWait, d.cfg.Tick<<min(failures, 6))
			select {
			case <-stop:
				return
			case <-time.After(wait):
			}
			continue
		}
		if failing != nil {
			d.deps.Log.Info("run loop: NATS reachable again", "run", run, "failed_attempts", failures)
			failing, failures = nil, 0
		}
		select {
		case <-stop:
			return
		case <-rs.wake:
		case <-tick.C:
		}
	}
}

var (
	errRunOver  = errors.New("run over")
	errConflict = errors.New("run status changed")
)

// step is one round of the loop: read the status and the completions,
// publish what admission allows, record the status.
func (d *Dispatcher) step(ctx context.Context, rs *runState, prog *progress, maxIn int) error {
	p := rs.plan
	run := p.Spec.RunID
	st, rev, err := d.status(ctx, run)
	if errors.Is(err, ErrNotFound) {
		d.deps.Log.Error("run status deleted: run loop stops", "run", run)
		return errRunOver
	}
	if err != nil {
		return fmt.Errorf("read run status: %w", err)
	}
	if st.Finished || st.Error != "" {
		return errRunOver // finished by another dispatcher, or rejected
	}
	done, err := prog.count(ctx, d.done, run, st.Published)
	if err != nil {
		return err
	}
	var pubErr error
	if st.Cancel != "" {
		d.admission(rs, 0) // publishes nothing more: its slots go to the others
	} else {
		limit := d.admission(rs, min(maxIn, p.Len()-done))
		for st.Published < p.Len() && st.Published-done < limit {
			req := p.Request(st.Published, time.Now().UTC())
			if pubErr = d.deps.Publish(ctx, schemas.EpisodeRequested.For(run), schemas.MsgID(run, req.EpisodeID, req.Attempt), req); pubErr != nil {
				break
			}
			st.Published++
		}
	}
	st.Done = done
	switch st.Cancel {
	case "":
		st.Finished = st.Published == p.Len() && done == p.Len()
	case schemas.CancelDrop:
		// Withdraw the requests no worker has taken; episodes already
		// running finish and are stored, but the run does not wait.
		if err := d.deps.Purge(ctx, run); err != nil {
			return err
		}
		st.Finished, st.Cancelled = true, true
	default: // drain
		st.Finished, st.Cancelled = done == st.Published, done == st.Published
	}
	if _, err := d.put(ctx, st, rev); err != nil {
		if errors.Is(err, ErrConflict) {
			return errConflict
		}
		return fmt.Errorf("update run status: %w", err)
	}
	if pubErr != nil {
		return pubErr
	}
	if st.Finished {
		if st.Cancelled {
			d.deps.Log.Info("run cancelled", "run", run, "mode", st.Cancel, "published", st.Published, "done", done, "total", p.Len())
		} else {
			d.deps.Log.Info("run finished", "run", run, "episodes", done)
		}
		return errRunOver
	}
	return nil
}

// Scored records a score's episode as done. Only a validated score of a
// planned episode of a recorded, unfinished run counts, once; any other is
// refused: acked (a redelivery would not make it valid), counted by
// reason and logged.
//
// subject is the subject the score arrived on ("" when unknown); a score
// published on another run's subject is refused.
func (d *Dispatcher) Scored(ctx context.Context, sc schemas.Score, subject string) error {
	if subject != "" && subject != schemas.EpisodeScored.For(sc.RunID) {
		d.refuse("subject_mismatch", sc, "subject", subject)
		return nil
	}
	st, _, err := d.status(ctx, sc.RunID)
	if errors.Is(err, ErrNotFound) {
		d.refuse("unknown_run", sc)
		return nil
	}
	if err != nil {
		return fmt.Errorf("score of %s: %w", sc.EpisodeID, err)
	}
	if st.Finished || st.Error != "" {
		d.refuse("run_over", sc)
		return nil
	}
	p, err := d.planFor(ctx, st.Spec)
	if err != nil {
		return fmt.Errorf("score of %s: %w", sc.EpisodeID, err)
	}
	i, ok := p.Lookup(sc.EpisodeID)
	if !ok {
		d.refuse("unplanned_episode", sc)
		return nil
	}
	fresh, err := d.done.mark(ctx, sc.RunID, i)
	if err != nil {
		return fmt.Errorf("score of %s: %w", sc.EpisodeID, err)
	}
	if !fresh {
		d.refuse("duplicate", sc)
		return nil
	}
	d.Wake(sc.RunID)
	return nil
}

func (d *Dispatcher) refuse(reason string, sc schemas.Score, kv ...any) {
	if d.deps.Refused != nil {
		d.deps.Refused(reason)
	}
	d.deps.Log.Warn("score not counted", append([]any{"reason", reason, "run", sc.RunID, "episode", sc.EpisodeID}, kv...)...)
}
