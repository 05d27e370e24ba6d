// Package service wires the dispatcher to the bus. It takes run specs,
// keeps at most MaxInFlight episodes of each run in flight (publishing the
// next ones as scores come in), records each run's progress in the runs
// key-value bucket (so a restarted dispatcher continues where it was), and
// turns dead-lettered episode messages into infra_failure results so that
// every episode of a run is accounted for.
package service
