package llm

import (
	"sync"
	"time"
)

// breakerThreshold is how many failures in a row, across all of a
// client's calls and with no success between them, say the endpoint is
// down (the breaker opens).
const breakerThreshold = 3

// breaker tracks whether a client's endpoint is down: failures that say
// so (refused connections, 429, 5xx, unreadable bodies; not a request
// that timed out, which says the model is slow) count in a row across
// calls, and a success closes it and wakes every call waiting to retry.
type breaker struct {
	mu        sync.Mutex
	streak    int
	answers   uint64        // successes so far
	openSince time.Time     // zero while closed
	wake      chan struct{} // closed at the next success
	waiting   int           // calls waiting out an open breaker
}

func newBreaker() *breaker { return &breaker{wake: make(chan struct{})} }

// success records an answer: the breaker closes and waiting calls wake.
// It returns when the breaker had opened (zero: it was closed).
func (b *breaker) success() (openedAt time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	openedAt = b.openSince
	b.answers++
	b.streak, b.openSince = 0, time.Time{}
	close(b.wake)
	b.wake = make(chan struct{})
	return openedAt
}

// failure records an outage-like failure and says whether the breaker is
// open now and whether this failure opened it; woken is closed at the
// next success.
func (b *breaker) failure(now time.Time) (open, opened bool, woken <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streak++
	if b.streak >= breakerThreshold && b.openSince.IsZero() {
		b.openSince, opened = now, true
	}
	return !b.openSince.IsZero(), opened, b.wake
}

// answered is the number of successes so far.
func (b *breaker) answered() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.answers
}

// enter and leave count the calls waiting out an open breaker.
func (b *breaker) enter() { b.mu.Lock(); b.waiting++; b.mu.Unlock() }
func (b *breaker) leave() { b.mu.Lock(); b.waiting--; b.mu.Unlock() }

// Health is the state of a client's endpoint.
type Health struct {
	// Down says the breaker is open: the last breakerThreshold (3) or more
	// answers in a row were failures (refused, 429, 5xx), none succeeding.
	Down bool
	// Since is when it opened (zero while up).
	Since time.Time
	// Waiting counts the calls waiting for the endpoint to answer again
	// (Config.WaitOutage).
	Waiting int
}

func (b *breaker) health() Health {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Health{Down: !b.openSince.IsZero(), Since: b.openSince, Waiting: b.waiting}
}
