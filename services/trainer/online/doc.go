// Package online is the trainer's online GRPO loop. Each iteration submits
// a RunSpec batch (tasks × K samples at policy version v, sampled through
// the current adapter) on medgym.run.submitted, follows the run's scores on
// medgym.episode.scored as they stream in, reads the scored rows from the
// trajectory store, builds a GRPO batch (package train) with a staleness
// bound, runs the configured training command, loads the new adapter into
// the serving engine (vLLM's /v1/load_lora_adapter) and announces version
// v+1 on medgym.policy.updated. The last completed iteration is kept in a
// state file, and every step is idempotent (deterministic run ids and
// message ids), so a killed trainer resumes the iteration it was in.
package online
