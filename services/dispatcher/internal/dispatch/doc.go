// Package dispatch is the dispatcher's domain, free of NATS.
//
// Planning: it turns a run spec into episode requests: it filters and
// samples the task list, plans K samples of each task with the per-sample
// temperature schedule, and names every episode deterministically so that
// a resubmitted run or a restarted dispatcher produces the same ids (and
// JetStream's dedupe drops the repeats). A plan is computed, not listed:
// episode i is sample i mod K of task i div K, an id parses back to its
// index, and a plan's memory does not grow with K.
//
// Running (Dispatcher): it records a submitted run, refuses runs of more
// than MaxEpisodes episodes, keeps at most MaxInFlight episodes of each run
// in flight (publishing the next ones as scores come in), records each
// run's progress in a RunStore and which planned episodes are scored in an
// EpisodeStore as completion bitmaps (so a restarted dispatcher continues
// where it was, and a forged or repeated score counts for nothing), stops a
// cancelled run, rides out store and bus outages by retrying, and turns
// dead-lettered episode messages into infra_failure results so that every
// episode of a run is accounted for. Every store write is a compare-and-set
// at a revision, so several dispatchers can share the stores.
//
// The stores and the publish function are interfaces declared here; the
// service adapts NATS key-value buckets to them, and the tests use
// in-memory fakes.
package dispatch
