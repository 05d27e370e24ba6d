package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
)

// maxRetryWait caps the wait between a loop's attempts while NATS is
// unreachable; the loop itself never gives up.
const maxRetryWait = 5 * time.Second

// loop is a run's admission control: publish while fewer than MaxInFlight
// published episodes are unscored; finish when every planned episode is
// published and scored, or when the run is cancelled. The scored episodes
// are the bits set in the completions bucket, so only validated, distinct,
// planned episode ids count (see scored). A failing NATS operation (the
// server is down or restarting) is retried with a backoff, forever: the
// loop ends only when the run is finished or the service stops.
func (d *Dispatcher) loop(ctx context.Context, stop <-chan struct{}, rs *runState) {
	p := rs.plan
	run := p.Spec.RunID
	maxIn := p.Spec.MaxInFlight
	if maxIn <= 0 {
		maxIn = 64
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
				d.log.Warn("run loop: NATS operation failed; retrying until it succeeds", "run", run, "err", err)
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
			d.log.Info("run loop: NATS reachable again", "run", run, "failed_attempts", failures)
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
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		d.log.Error("run status deleted: run loop stops", "run", run)
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
	if st.Cancel == "" {
		for st.Published < p.Len() && st.Published-done < maxIn {
			req := p.Request(st.Published, time.Now().UTC())
			if pubErr = d.conn.Publish(ctx, schemas.EpisodeRequested.For(run), schemas.MsgID(run, req.EpisodeID, req.Attempt), req); pubErr != nil {
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
		if err := d.purgeRequests(ctx, run); err != nil {
			return err
		}
		st.Finished, st.Cancelled = true, true
	default: // drain
		st.Finished, st.Cancelled = done == st.Published, done == st.Published
	}
	if _, err := d.put(ctx, st, rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return errConflict
		}
		return fmt.Errorf("update run status: %w", err)
	}
	if pubErr != nil {
		return pubErr
	}
	if st.Finished {
		if st.Cancelled {
			d.log.Info("run cancelled", "run", run, "mode", st.Cancel, "published", st.Published, "done", done, "total", p.Len())
		} else {
			d.log.Info("run finished", "run", run, "episodes", done)
		}
		return errRunOver
	}
	return nil
}

// purgeRequests removes the run's episode requests still in the stream.
func (d *Dispatcher) purgeRequests(ctx context.Context, run string) error {
	s, err := d.conn.JS.Stream(ctx, schemas.StreamEpisodes)
	if err != nil {
		return fmt.Errorf("purge requests of run %s: %w", run, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(schemas.EpisodeRequested.For(run))); err != nil {
		return fmt.Errorf("purge requests of run %s: %w", run, err)
	}
	return nil
}

// scored records a score's episode as done. Only a validated score of a
// planned episode of a recorded, unfinished run counts, once; any other is
// refused: acked (a redelivery would not make it valid), counted by
// reason and logged.
func (d *Dispatcher) scored(ctx context.Context, sc schemas.Score) error {
	if m, ok := bus.Delivery(ctx); ok && m.Subject() != schemas.EpisodeScored.For(sc.RunID) {
		d.refuse("subject_mismatch", sc, "subject", m.Subject())
		return nil
	}
	st, _, err := d.status(ctx, sc.RunID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
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
	d.wakeRun(sc.RunID)
	return nil
}

func (d *Dispatcher) refuse(reason string, sc schemas.Score, kv ...any) {
	d.refused.WithLabelValues(reason).Inc()
	d.log.Warn("score not counted", append([]any{"reason", reason, "run", sc.RunID, "episode", sc.EpisodeID}, kv...)...)
}
