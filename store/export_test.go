package store

import (
	"context"
	"fmt"
	"sync"
)

// Create exposes the backend's create-only write to the conformance suite.
func Create(ctx context.Context, s *Store, key string, data []byte) error {
	return s.be.create(ctx, key, data)
}

// Get exposes the backend's read.
func Get(ctx context.Context, s *Store, key string) ([]byte, error) { return s.be.get(ctx, key) }

// MemClaims are Claims in memory, shared by the Stores of one test as the
// verifiers share their key-value bucket.
type MemClaims struct {
	mu sync.Mutex
	m  map[string]memClaim
}

type memClaim struct {
	part string
	rev  uint64
}

func NewMemClaims() *MemClaims { return &MemClaims{m: map[string]memClaim{}} }

func (c *MemClaims) Claim(_ context.Context, run, ep, part string) (string, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := run + "." + ep
	if cur, ok := c.m[k]; ok {
		return cur.part, cur.rev, nil
	}
	c.m[k] = memClaim{part, 1}
	return part, 1, nil
}

func (c *MemClaims) Move(_ context.Context, run, ep, part string, rev uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := run + "." + ep
	if cur := c.m[k]; cur.rev != rev {
		return fmt.Errorf("%s at revision %d, not %d: %w", k, cur.rev, rev, ErrClaimMoved)
	}
	c.m[k] = memClaim{part, rev + 1}
	return nil
}

// Part returns the part claimed for the episode ("" when none).
func (c *MemClaims) Part(run, ep string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[run+"."+ep].part
}
