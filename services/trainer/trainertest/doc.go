// Package trainertest holds the trainer's test helpers that tests in other
// modules share (the systemtest module's trainer tests): Python, the
// interpreter the training step's tests run.
package trainertest
