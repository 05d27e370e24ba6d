package tasks

import (
	"context"
	"errors"
)

func generateMIMICIII(ctx context.Context, dataRoot, dir string) error {
	return errors.New("not implemented yet")
}

func generateEICU(ctx context.Context, dataRoot, dir string) error {
	return errors.New("not implemented yet")
}
