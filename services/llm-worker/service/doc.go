// Package service wires the llm-worker to the bus: it consumes episode
// requests and checked observations, keeps each episode's state in the
// JetStream key-value bucket after every turn, and publishes actions and
// finished episodes. The operator CLI runs it in-process; main.go runs it
// as its own process.
package service
