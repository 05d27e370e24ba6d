// Package nats is a planted violation: a service package importing NATS.
package nats

import _ "github.com/nats-io/nats.go"
