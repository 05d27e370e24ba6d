package verifier

import (
	"context"
	"errors"
	"fmt"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/store"
)

// claims are the store's Claims on the MEDGYM_STORED bucket, shared by
// every verifier: key "<run>.<episode>", value the file's key.
type claims struct{ b *bus.Bucket[string] }

func openClaims(ctx context.Context, conn *bus.Conn) (claims, error) {
	b, err := bus.OpenBucket[string](ctx, conn, schemas.BucketStored)
	if err != nil {
		return claims{}, err
	}
	return claims{b}, nil
}

func claimKey(run, episode string) string { return run + "." + episode }

// Claim creates the claim, or reads the one there.
func (c claims) Claim(ctx context.Context, run, episode, part string) (string, uint64, error) {
	key := claimKey(run, episode)
	rev, err := c.b.Create(ctx, key, part)
	if err == nil {
		return part, rev, nil
	}
	if !errors.Is(err, bus.ErrConflict) {
		return "", 0, err
	}
	cur, rev, err := c.b.Get(ctx, key)
	if err != nil {
		return "", 0, fmt.Errorf("read claim %s: %w", key, err)
	}
	return cur, rev, nil
}

// Move compares and sets.
func (c claims) Move(ctx context.Context, run, episode, part string, rev uint64) error {
	_, err := c.b.Update(ctx, claimKey(run, episode), part, rev)
	if errors.Is(err, bus.ErrConflict) {
		return fmt.Errorf("%w: %w", store.ErrClaimMoved, err)
	}
	return err
}
