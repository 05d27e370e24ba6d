package tasks

import (
	"context"
	"errors"
)

func generateTREQS(ctx context.Context, dataRoot, dir string) error {
	return errors.New("not implemented yet")
}
