package env

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/internal/session"
)

// store is session.Store on the MEDGYM_ENV_SESSIONS bucket: "s.<id>" the
// session (large ones offloaded to the blob store), "e.<episode>" its id,
// "n.<run>.<task token>" the next sample index.
type store struct {
	// counterMu serialises this process's sample counter updates: the
	// many sessions of one task in one run (a GRPO group) are created at
	// once, and compare-and-set alone would make them collide; other
	// processes still meet on the revision.
	counterMu sync.Mutex
	sessions  *bus.Bucket[session.Session]
	index     *bus.Bucket[string]
	counters  *bus.Bucket[int]
}

func openStore(ctx context.Context, conn *bus.Conn) (*store, error) {
	s, err := bus.OpenStateBucket[session.Session](ctx, conn, schemas.BucketEnvSessions)
	if err != nil {
		return nil, err
	}
	ix, err := bus.OpenBucket[string](ctx, conn, schemas.BucketEnvSessions)
	if err != nil {
		return nil, err
	}
	n, err := bus.OpenBucket[int](ctx, conn, schemas.BucketEnvSessions)
	if err != nil {
		return nil, err
	}
	return &store{sessions: s, index: ix, counters: n}, nil
}

func storeErr(err error) error {
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return fmt.Errorf("%w: %w", session.ErrNotFound, err)
	case errors.Is(err, bus.ErrConflict):
		return fmt.Errorf("%w: %w", session.ErrConflict, err)
	}
	return err
}

func (s *store) Get(ctx context.Context, id string) (session.Session, uint64, error) {
	v, rev, err := s.sessions.Get(ctx, "s."+id)
	return v, rev, storeErr(err)
}

func (s *store) Create(ctx context.Context, v session.Session) error {
	if _, err := s.index.Put(ctx, "e."+v.State.Request.EpisodeID, v.ID); err != nil {
		return storeErr(err)
	}
	_, err := s.sessions.Create(ctx, "s."+v.ID, v)
	return storeErr(err)
}

func (s *store) Update(ctx context.Context, v session.Session, rev uint64) (uint64, error) {
	rev, err := s.sessions.Update(ctx, "s."+v.ID, v, rev)
	return rev, storeErr(err)
}

func (s *store) Delete(ctx context.Context, v session.Session) error {
	if err := s.index.Delete(ctx, "e."+v.State.Request.EpisodeID); err != nil && !errors.Is(err, bus.ErrNotFound) {
		return storeErr(err)
	}
	return storeErr(s.sessions.Delete(ctx, "s."+v.ID))
}

func (s *store) List(ctx context.Context) ([]string, error) {
	keys, err := s.sessions.Keys(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, k := range keys {
		if id, ok := strings.CutPrefix(k, "s."); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (s *store) ByEpisode(ctx context.Context, episodeID string) (string, error) {
	if !schemas.ValidToken(episodeID) {
		return "", session.ErrNotFound
	}
	id, _, err := s.index.Get(ctx, "e."+episodeID)
	return id, storeErr(err)
}

// NextSample increments the task's counter by compare-and-set.
func (s *store) NextSample(ctx context.Context, runID, taskID string) (int, error) {
	key := "n." + runID + "." + schemas.TaskToken(taskID)
	s.counterMu.Lock()
	defer s.counterMu.Unlock()
	for i := range 64 {
		if i > 0 {
			// Another process took the revision: back off a little (a
			// bounded retry of an idempotent read-modify-write).
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(time.Duration(rand.IntN(1<<min(i, 6))+1) * time.Millisecond):
			}
		}
		n, rev, err := s.counters.Get(ctx, key)
		switch {
		case errors.Is(err, bus.ErrNotFound):
			if _, err := s.counters.Create(ctx, key, 1); errors.Is(err, bus.ErrConflict) {
				continue
			} else if err != nil {
				return 0, err
			}
			return 0, nil
		case err != nil:
			return 0, err
		}
		if _, err := s.counters.Update(ctx, key, n+1, rev); errors.Is(err, bus.ErrConflict) {
			continue
		} else if err != nil {
			return 0, err
		}
		return n, nil
	}
	return 0, fmt.Errorf("sample counter %s: %w", key, session.ErrConflict)
}
