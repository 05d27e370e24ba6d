package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/medgym/medgym/schemas"
)

// maxDeliveriesAdvisory is the JetStream advisory sent when a message has
// been delivered MaxDeliver times without an ack.
const maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"

// WatchMaxDeliveries moves messages that ran out of deliveries to the
// dead-letter stream, with the reason and original subject as headers, so
// that they are accounted for instead of silently dropped. The returned
// function stops watching.
func WatchMaxDeliveries(ctx context.Context, conn *Conn, log *slog.Logger) (stop func(), err error) {
	sub, err := conn.nc.Subscribe(maxDeliveriesAdvisory, func(m *nats.Msg) {
		var adv struct {
			Stream     string `json:"stream"`
			Consumer   string `json:"consumer"`
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries uint64 `json:"deliveries"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			log.Warn("bad max-deliveries advisory", "err", err)
			return
		}
		ctx, cancel := bounded(ctx, requestTimeout)
		defer cancel()
		if _, ok := schemas.StreamSubjects[adv.Stream]; !ok || adv.Stream == schemas.StreamDeadLetter {
			return
		}
		s, err := conn.js.Stream(ctx, adv.Stream)
		if err != nil {
			log.Warn("dead letter: stream", "stream", adv.Stream, "err", err)
			return
		}
		raw, err := s.GetMsg(ctx, adv.StreamSeq)
		if err != nil {
			log.Warn("dead letter: get message", "stream", adv.Stream, "seq", adv.StreamSeq, "err", err)
			return
		}
		dl := deadLetterMsg("maxdeliver", raw.Data, raw.Header, raw.Subject,
			fmt.Sprintf("consumer %s gave up after %d deliveries", adv.Consumer, adv.Deliveries), adv.Stream, adv.StreamSeq)
		if _, err := conn.js.PublishMsg(ctx, dl); err != nil {
			log.Warn("dead letter: publish", "err", err)
			return
		}
		log.Warn("message out of deliveries moved to dead letters", "subject", raw.Subject, "consumer", adv.Consumer)
	})
	if err != nil {
		return nil, fmt.Errorf("watch max-deliveries advisories: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
