package sandbox

import (
	"context"
	"errors"
	"log/slog"
)

func newDockerRunner(_ context.Context, _ Config, _ *slog.Logger) (runner, error) {
	return nil, errors.New("sandbox: docker backend not built yet")
}
