package bustest

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// NakUntilGivenUp pulls from cons deliveries+1 times, one message each,
// naking what it gets: on a consumer with MaxDeliver deliveries the
// message is delivered that many times, and the last pull makes the
// server give up on it and raise the max-deliveries advisory.
func NakUntilGivenUp(cons jetstream.Consumer, deliveries int) error {
	for range deliveries + 1 {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		for m := range b.Messages() {
			_ = m.Nak()
		}
	}
	return nil
}
