// Package replay re-executes the logged actions of stored episodes and
// re-scores them with the current verifier: a determinism check for
// `medgym replay`. Without an executor it re-scores the stored outputs
// alone (`medgym rescore`): no agent code runs, and an episode whose
// verdict may depend on output the row stores capped is marked
// NeedsExecution (replay it to be sure).
//
// For each episode, the turns that reached the sandbox during the run
// (validate_code, terminal and request_info actions that parsed, were
// permitted and were not stopped by the loop guard) run again, in order, in
// a fresh workspace with the task's resources mounted. Each run is compared
// with the recorded one on status, exit code, stdout, stderr and truncation
// (never on duration or memory); code runs the verifier checked are checked
// again; then the episode is scored again. Anything that differs is a
// Change.
//
// With LabelSets it re-grades under other label sets (`medgym rescore
// --labels`), and FlipsOf says what that changes for training data.
package replay
