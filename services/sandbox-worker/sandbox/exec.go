package sandbox

import (
	"context"
	"log/slog"

	"github.com/medgym/medgym/schemas"
)

// Exec runs one action in a fresh sandbox and releases it: the operator
// CLI's `medgym sandbox exec` and `medgym tasks reference-outputs`.
func Exec(ctx context.Context, cfg Config, req schemas.ActionRequest, log *slog.Logger) (schemas.ExecResult, error) {
	sb, err := New(ctx, cfg, log)
	if err != nil {
		return schemas.ExecResult{}, err
	}
	defer func() { _ = sb.Close() }()
	defer func() { _ = sb.Release(req.Ref.EpisodeID) }()
	return sb.Execute(ctx, req)
}
