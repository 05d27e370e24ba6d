package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/schemas"
)

// The run client: what `medgym run`, the trainer's online loop and the
// system tests do to run a spec on the pipeline. It lives in bus because
// it reads JetStream (the runs bucket, an ordered consumer on the scores
// stream) and every caller needs it, the trainer included, which must not
// depend on the CLI's module.

// SubmitRun publishes spec on RunSubmitted with the run's message id
// (schemas.RunMsgID): resubmitting a run id continues that run.
func SubmitRun(ctx context.Context, conn *Conn, spec schemas.RunSpec) error {
	return conn.Publish(ctx, schemas.RunSubmitted.For(spec.RunID), schemas.RunMsgID(spec.RunID), spec)
}

// RunProgress is one step of FollowRun.
type RunProgress struct {
	// Status is the dispatcher's record of the run (zero until it has one).
	Status schemas.RunStatus
	// Scores are the scores of the run stored since the previous step, in
	// stream order. A copy that follows its first within RecentScores
	// scores (a result redelivered after an outage) is left out; an older
	// copy may show again, so a caller that keeps scores per episode
	// keys them by episode id.
	Scores []schemas.Score
	// Scored counts the distinct planned episodes scored so far: the
	// dispatcher's count (RunStatus.Done, from its completion bitmap,
	// ADR 0007), so following a run takes memory independent of its size.
	Scored int
	// Err is a transient read error of this step (NATS down or
	// restarting): the follow goes on and picks up where it was.
	Err error
}

// FollowRun follows run runID: every `every` it reads the new scores and
// the run's status and yields them. It ends after the step whose status
// is Finished (that step holds the scores that finished the run), with an
// error when the dispatcher rejected the run, and with ctx's error (and
// the last progress) when ctx is done. It rides out NATS outages: a failed
// read is reported in RunProgress.Err and retried on the next step.
func FollowRun(ctx context.Context, conn *Conn, runID string, every time.Duration) iter.Seq2[RunProgress, error] {
	return func(yield func(RunProgress, error) bool) {
		rkv, err := conn.js.KeyValue(ctx, schemas.BucketRuns)
		if err != nil {
			yield(RunProgress{}, fmt.Errorf("runs bucket: %w", err))
			return
		}
		kv := boundedKV{rkv}
		cons, err := conn.js.OrderedConsumer(ctx, schemas.StreamScores, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{schemas.EpisodeScored.For(runID)}})
		if err != nil {
			yield(RunProgress{}, fmt.Errorf("follow scores of run %s: %w", runID, err))
			return
		}
		recent := newRecentIDs(RecentScores)
		// read appends the scores stored since the last read.
		read := func(p *RunProgress) {
			for {
				batch, err := cons.FetchNoWait(500)
				if err != nil {
					p.Err = err
					return
				}
				n := 0
				for m := range batch.Messages() {
					n++
					var sc schemas.Score
					if json.Unmarshal(m.Data(), &sc) == nil && strings.HasPrefix(sc.EpisodeID, runID+"--") && recent.add(sc.EpisodeID) {
						p.Scores = append(p.Scores, sc)
					}
				}
				if n == 0 {
					return
				}
			}
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		var st schemas.RunStatus
		for {
			var p RunProgress
			// The ordered consumer's fetch takes no context and, with NATS
			// gone, re-creates its consumer until NATS is back: a cancelled
			// follow (SIGTERM to medgym run during an outage) must not wait
			// for it. The read is left to finish on its own; p is not read.
			fetched := make(chan struct{})
			go func() { read(&p); close(fetched) }()
			select {
			case <-fetched:
			case <-ctx.Done():
				yield(RunProgress{Status: st, Scored: st.Done}, ctx.Err())
				return
			}
			if e, err := kv.Get(ctx, runID); err == nil {
				_ = json.Unmarshal(e.Value(), &st)
			} else if !errors.Is(err, jetstream.ErrKeyNotFound) && p.Err == nil && ctx.Err() == nil {
				p.Err = err
			}
			p.Status = st
			if st.Error != "" {
				yield(p, fmt.Errorf("run %s rejected by the dispatcher: %s", runID, st.Error))
				return
			}
			if st.Finished {
				read(&p) // the scores that finished it
			}
			p.Scored = st.Done
			if !yield(p, nil) || st.Finished {
				return
			}
			select {
			case <-ctx.Done():
				yield(RunProgress{Status: st, Scored: st.Done}, ctx.Err())
				return
			case <-tick.C:
			}
		}
	}
}

// RecentScores is how many episode ids FollowRun remembers to leave out a
// score's redelivered copy.
const RecentScores = 4096

// recentIDs is a set of the last n ids added (a ring): its memory is
// bounded whatever the number of ids it is shown.
type recentIDs struct {
	ring []string
	next int
	set  map[string]struct{}
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{ring: make([]string, 0, n), set: make(map[string]struct{}, n)}
}

// add records id and reports whether it was not among the last n.
func (r *recentIDs) add(id string) bool {
	if _, ok := r.set[id]; ok {
		return false
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, id)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % len(r.ring)
	}
	r.set[id] = struct{}{}
	return true
}

func (r *recentIDs) len() int { return len(r.set) }
