package worker

import (
	"encoding/json"
	"sync"

	"github.com/medgym/medgym/schemas"
)

// maxSaved bounds savedStates; past it, it starts over (the states of the
// episodes in flight are read from the bucket once more).
const maxSaved = 4096

// savedStates holds, per episode, the state a worker saved last and its
// revision, as the JSON a bucket read would decode: the next observation
// works on exactly what a read would have returned, without the round trip.
// A finished episode's state is not kept. The zero value is ready to use.
type savedStates struct {
	mu sync.Mutex
	m  map[string]savedState
}

type savedState struct {
	b   []byte
	rev uint64
}

// put records st as saved at revision rev.
func (c *savedStates) put(st schemas.EpisodeState, rev uint64) {
	id := st.Request.EpisodeID
	var b []byte
	if st.Result == nil {
		b, _ = json.Marshal(st) // nil on error: nothing is kept
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b == nil {
		delete(c.m, id)
		return
	}
	if c.m == nil || len(c.m) >= maxSaved {
		c.m = map[string]savedState{}
	}
	c.m[id] = savedState{b, rev}
}

// take removes and returns the episode's saved state, if any.
func (c *savedStates) take(id string) (schemas.EpisodeState, uint64, bool) {
	c.mu.Lock()
	s, ok := c.m[id]
	delete(c.m, id)
	c.mu.Unlock()
	var st schemas.EpisodeState
	if !ok || json.Unmarshal(s.b, &st) != nil {
		return st, 0, false
	}
	return st, s.rev, true
}
