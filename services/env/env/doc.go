// Package env is the environment server's composition root: Config
// (flags, validation, what is logged) and Run, which wires the session
// domain to the bus (the checked observations and scores of its sessions,
// its key-value bucket, the run records the workers admit by) and serves
// the HTTP API until the context is done.
package env
