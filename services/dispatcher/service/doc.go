// Package service wires the dispatcher to the bus. It takes run specs,
// refuses runs of more than MaxEpisodes episodes, keeps at most MaxInFlight
// episodes of each run in flight (publishing the next ones as scores come
// in), records each run's progress in the runs key-value bucket and which
// planned episodes are scored in the completions bucket (so a restarted
// dispatcher continues where it was, and a forged or repeated score counts
// for nothing), stops a run that `medgym cancel` asked to stop, rides out
// NATS outages by retrying, and turns dead-lettered episode messages into
// infra_failure results so that every episode of a run is accounted for.
package service
