package bus

import (
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
