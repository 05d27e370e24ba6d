// Package sandboxworker is the sandbox-worker service, wired to the bus: it consumes action
// requests, executes them in the episode's sandbox, and publishes the
// observation. Workspaces are released when the episode completes (heard on
// the completed-episode subject) and reaped when idle.
package sandboxworker
