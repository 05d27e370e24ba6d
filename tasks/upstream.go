package tasks

import (
	"context"
	"errors"
)

// LoadUpstream reads an upstream MedAgentGym task folder.
func LoadUpstream(ctx context.Context, src Source) ([]Task, error) {
	return nil, errors.New("upstream task folders: not implemented yet")
}
