// Package trainer holds the trainer's system tests: the online loop (a
// killed and resumed trainer, the resident worker with overlap, a loop that
// serves its own policy) and the dataset builder, each against a whole
// pipeline started by package testenv.
package trainer
