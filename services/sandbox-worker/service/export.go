package service

import (
	"context"
	"log/slog"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/internal/sandbox"
)

// Sandbox is a long-lived sandbox for the operator CLI (`medgym replay`):
// each episode id gets its own workspace, kept across Execute calls until
// Release. It is safe for concurrent use; actions of one episode run in
// order.
type Sandbox struct{ sb *sandbox.Sandbox }

// Open checks the backend's prerequisites and prepares the work root (see
// SandboxConfig). Close it when done.
func Open(ctx context.Context, cfg SandboxConfig, log *slog.Logger) (*Sandbox, error) {
	sb, err := sandbox.New(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	return &Sandbox{sb: sb}, nil
}

// Execute runs one action in the episode's workspace (created on first
// use, with req.Resources mounted read-only). The error is non-nil only
// for a request that cannot be handled at all; a failed run is a result.
func (s *Sandbox) Execute(ctx context.Context, req schemas.ActionRequest) (schemas.ExecResult, error) {
	return s.sb.Execute(ctx, req)
}

// Release removes the episode's workspace and stops its processes.
func (s *Sandbox) Release(episodeID string) error { return s.sb.Release(episodeID) }

// Close releases every workspace and the work root if Open created it.
func (s *Sandbox) Close() error { return s.sb.Close() }

// Stats says what isolation the sandbox has (backend, what bounds a run's
// resources, seccomp) and what it has done.
func (s *Sandbox) Stats() sandbox.Stats { return s.sb.Stats() }
