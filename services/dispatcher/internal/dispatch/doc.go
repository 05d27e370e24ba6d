// Package dispatch turns a run spec into episode requests: it filters and
// samples the task list, plans K samples of each task with the per-sample
// temperature schedule, and names every episode deterministically so that
// a resubmitted run or a restarted dispatcher produces the same ids (and
// JetStream's dedupe drops the repeats). A plan is computed, not listed:
// episode i is sample i mod K of task i div K, an id parses back to its
// index, and a plan's memory does not grow with K. It also holds the bit
// arithmetic of the completion bitmaps the service keeps per run.
package dispatch
