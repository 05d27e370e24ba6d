package tasks

import (
	"context"
	"errors"
)

func generateBiostat(ctx context.Context, dataRoot, dir string) error {
	return errors.New("not implemented yet")
}

func generateNPowerAI(ctx context.Context, dataRoot, dir string) error {
	return errors.New("not implemented yet")
}
