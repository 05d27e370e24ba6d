package bus

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/medgym/medgym/schemas"
)

// Broadcast calls f with every message published on subject (a wildcard
// allowed) that decodes as T, in every process that subscribes: a core
// NATS subscription, not a shared durable, so it is for notifications
// that each process acts on (a wake-up, a release) and that may be lost
// during an outage. Messages that do not decode are ignored. Call stop to
// unsubscribe.
func Broadcast[T any](c *Conn, subject string, f func(T)) (stop func(), err error) {
	sub, err := c.nc.Subscribe(subject, func(m *nats.Msg) {
		v, err := decodeLoose[T](m.Data)
		if err == nil {
			f(v)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// decodeLoose reads data as a T: JSON, validated when T is a
// schemas.Validator. Unlike decode (the handlers'), it makes no junk.
func decodeLoose[T any](data []byte) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, err
	}
	if val, ok := any(v).(schemas.Validator); ok {
		if err := val.Validate(); err != nil {
			return v, err
		}
	}
	return v, nil
}
