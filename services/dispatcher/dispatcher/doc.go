// Package dispatcher is the dispatcher service, wired to the bus: it adapts the runs and
// completions key-value buckets to dispatch.RunStore and
// dispatch.EpisodeStore, the bus's Publish to dispatch.PublishFunc, the
// score subscription to Dispatcher.Wake, and the runs, scores and
// dead-letter consumers to Dispatcher.Submit, Scored and DeadLetter
// (mapping the dead letters the dispatcher cannot account for to junk).
// Everything the dispatcher decides lives in internal/dispatch.
package dispatcher
