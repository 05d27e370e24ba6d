package bus

import (
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The raw handles, for bus's own black-box tests only.

func JetStream(c *Conn) jetstream.JetStream { return c.js }

func NATS(c *Conn) *nats.Conn { return c.nc }

// RecentIDs is FollowRun's bounded set of recent episode ids.
type RecentIDs = recentIDs

func NewRecentIDs(n int) *RecentIDs { return newRecentIDs(n) }

func (r *recentIDs) Add(id string) bool { return r.add(id) }

func (r *recentIDs) Len() int { return r.len() }

// Subscriber is the router's subscriber, for tests of its pull loop.
type Subscriber interface {
	message.Subscriber
	Renewals() int64
}

// NewSubscriber is the subscriber the router puts on cons, with
// reconnects as the connection's reconnect count, looking at it every
// check.
func NewSubscriber(cons jetstream.Consumer, reconnects func() uint64, check time.Duration) Subscriber {
	s := newSubscriber(cons, slog.New(slog.DiscardHandler), func(uint64) time.Duration { return 0 })
	s.reconnects, s.check = reconnects, check
	return s
}

func (s *subscriber) Renewals() int64 { return s.renewals.Load() }

// SetStorageRetry paces rt's handlers while the store is full.
func SetStorageRetry(rt *Router, first, max time.Duration) {
	rt.storageRetry = storageRetry{first, max}
}

// SetMaxInPlayScan bounds EpisodesInPlay's reads per scan until the test ends.
func SetMaxInPlayScan(t interface{ Cleanup(func()) }, n int) {
	old := maxInPlayScan
	maxInPlayScan = n
	t.Cleanup(func() { maxInPlayScan = old })
}

// IsOrderedCleanup is Connect's test for a refused consumer delete.
var IsOrderedCleanup = isOrderedCleanup

// SetRequestTimeout bounds the bus's NATS requests by d until the test ends.
func SetRequestTimeout(t interface{ Cleanup(func()) }, d time.Duration) {
	old := requestTimeout
	requestTimeout = d
	t.Cleanup(func() { requestTimeout = old })
}
