package sandbox

import (
	"fmt"
	"sync"
)

// capBuffer keeps the first limit bytes written to it and counts the rest.
// Once total exceeds hard it calls onHard once (used to kill a run that
// floods its output). It never grows beyond limit.
type capBuffer struct {
	mu     sync.Mutex
	buf    []byte
	limit  int
	total  int64
	hard   int64
	onHard func()
	fired  bool
}

func newCapBuffer(limit int, hard int64, onHard func()) *capBuffer {
	return &capBuffer{limit: limit, hard: hard, onHard: onHard}
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	if room := c.limit - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	c.total += int64(len(p))
	fire := c.hard > 0 && c.total > c.hard && !c.fired && c.onHard != nil
	if fire {
		c.fired = true
	}
	c.mu.Unlock()
	if fire {
		c.onHard()
	}
	return len(p), nil
}

// result returns the kept text, with a visible marker when bytes were
// dropped, and whether it was truncated.
func (c *capBuffer) result() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total <= int64(len(c.buf)) {
		return string(c.buf), false
	}
	return string(c.buf) + truncMarker(c.total-int64(len(c.buf))), true
}

// size is the number of bytes written, kept or not.
func (c *capBuffer) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

func truncMarker(dropped int64) string {
	return fmt.Sprintf("\n...[output truncated: %d more bytes not shown]", dropped)
}
