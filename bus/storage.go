package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's error codes for a full store (nats-server's errors.json).
const (
	// codeInsufficientResources: the server's store is at its
	// max_file_store (or max_memory_store); a publish is refused.
	codeInsufficientResources = 10023
	// codeStorageExceeded: a stream's max_bytes does not fit in what the
	// server (or the account) has left to reserve.
	codeStorageExceeded = 10047
	// codeAccountResourcesExceeded: the account's JetStream limits are
	// reached.
	codeAccountResourcesExceeded = 10002
)

// IsStorageFull reports whether err is JetStream refusing to store (an
// API error, wrapped or not): the server's store is at its limit
// (insufficient resources), a reservation does not fit, the account's
// limits are reached, or the disk itself is full (no space left on
// device). Such an error passes when space is
// freed; it is neither the message's fault nor permanent.
func IsStorageFull(err error) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		// Only JetStream's own answer counts: a handler's error that
		// mentions a full disk (a sandbox's, say) is the handler's.
		return false
	}
	switch ae.ErrorCode {
	case codeInsufficientResources, codeStorageExceeded, codeAccountResourcesExceeded:
		return true
	}
	d := ae.Description
	return strings.Contains(d, "no space left") || strings.Contains(d, "insufficient resources") || strings.Contains(d, "insufficient storage")
}

// storageRetry is how a handler meeting a full store waits: from first to
// at most max between attempts.
type storageRetry struct{ first, max time.Duration }

var defaultStorageRetry = storageRetry{first: time.Second, max: 15 * time.Second}

// whileStorageFull calls f until it returns something other than a
// storage-full error, waiting with a backoff between attempts and counting
// each refusal; it gives up only when ctx is done. Retrying in place
// instead of nak-ing keeps a full store from spending the message's
// deliveries (MaxDeliver): a message that ran out of them while the dead
// letters could not be written either would be lost.
func (rt *Router) whileStorageFull(ctx context.Context, handler string, f func() error) error {
	wait := rt.storageRetry.first
	for n := 1; ; n++ {
		err := f()
		if !IsStorageFull(err) {
			if n > 1 {
				rt.log.InfoContext(ctx, "JetStream stores again", "handler", handler, "attempts", n)
			}
			return err
		}
		rt.Metrics.countStorageFull(handler)
		if n == 1 || n%10 == 0 {
			rt.log.WarnContext(ctx, "JetStream storage full: retrying until space is freed (raise max_file_store, grow the volume, or purge)",
				"handler", handler, "attempt", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, rt.storageRetry.max)
	}
}

// explainStorage turns EnsureStreams' failure to reserve the streams'
// max_bytes into what to do about it: how much file storage the server
// offers, how much medgym's streams reserve, and the knobs. Other errors
// pass unchanged.
func explainStorage(ctx context.Context, c *Conn, o StreamOptions, err error) error {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) || ae.ErrorCode != codeStorageExceeded {
		return err
	}
	reserve := o.withDefaults().DeadLetterMaxBytes // the one stream with a max_bytes
	offered := "an unknown number of"
	if n, ok := reservable(ctx, c, reserve); ok {
		offered = fmt.Sprintf("%d", n)
	}
	return fmt.Errorf("%w: JetStream offers %s bytes of file storage; medgym's streams reserve %d (the dead-letter stream's max_bytes) plus room for their messages: "+
		"give nats-server a larger store volume or set jetstream { max_file_store: ... } to at least that (nats-server sizes its default to 75%% of the volume's free space); see deploy/README.md",
		err, offered, reserve)
}

// probeStream is the stream reservable creates and deletes.
const probeStream = "MEDGYM_STORAGE_PROBE"

// reservable finds how many bytes of file storage the server still lets a
// stream reserve, below limit: the account's limit when it has one, else
// by a binary search over the max_bytes of a probe stream it creates and
// deletes (the server reports its own limit only to its system account).
func reservable(ctx context.Context, c *Conn, limit int64) (int64, bool) {
	if info, err := c.js.AccountInfo(ctx); err == nil && info.Limits.MaxStore > 0 {
		return info.Limits.MaxStore - int64(info.Store), true
	}
	// A probe left by a process stopped mid-search keeps its reservation
	// and refuses a probe of another size: remove it first. A user that
	// may create streams but not delete them (the deploy permissions)
	// stops here.
	if !dropProbe(ctx, c) {
		return 0, false
	}
	deleted := true
	fits := func(n int64) bool {
		_, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: probeStream, Subjects: []string{"_medgym.storage.probe"},
			Storage: jetstream.FileStorage, MaxBytes: n})
		if err != nil {
			return false
		}
		deleted = dropProbe(ctx, c)
		return true
	}
	if !fits(1) || !deleted {
		return 0, false
	}
	lo, hi := int64(1), limit // fits(lo), !fits(hi)
	for hi-lo > 1 && ctx.Err() == nil && deleted {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, ctx.Err() == nil && deleted
}

// dropProbe deletes the probe stream if there is one, even once ctx is
// done (a probe left behind would keep its reservation), and says whether
// none is left.
func dropProbe(ctx context.Context, c *Conn) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeDeleteTimeout)
	defer cancel()
	err := c.js.DeleteStream(ctx, probeStream)
	return err == nil || errors.Is(err, jetstream.ErrStreamNotFound)
}

// probeDeleteTimeout bounds the deletion of the probe stream.
const probeDeleteTimeout = 5 * time.Second
