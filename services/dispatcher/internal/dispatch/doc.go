// Package dispatch turns a run spec into episode requests: it filters and
// samples the task list, expands each task into K samples with the
// per-sample temperature schedule, and names every episode
// deterministically so that a resubmitted run or a restarted dispatcher
// produces the same ids (and JetStream's dedupe drops the repeats).
package dispatch
