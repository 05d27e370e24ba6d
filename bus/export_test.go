package bus

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The raw handles, for bus's own black-box tests only.

func JetStream(c *Conn) jetstream.JetStream { return c.js }

func NATS(c *Conn) *nats.Conn { return c.nc }
