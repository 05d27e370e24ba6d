package bus

import (
	"errors"
	"fmt"
)

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: the message goes to the
// dead-letter stream instead of being redelivered.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err (or any error it wraps) was marked Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// Junk reasons: the label of medgym_messages_junk_total.
const (
	// JunkUndecodable: the body is empty, not JSON, or JSON but not an
	// object (null, an array, a number).
	JunkUndecodable = "undecodable"
	// JunkInvalid: the body is a JSON object but not a valid message of the
	// handler's type (wrong field types, or Validate fails).
	JunkInvalid = "invalid"
	// JunkUnknownRun: the message names a run the dispatcher never accepted.
	JunkUnknownRun = "unknown_run"
	// JunkUnknownEpisode: the run is known but the episode is not one of its
	// planned episodes (or no worker holds its state).
	JunkUnknownEpisode = "unknown_episode"
	// JunkDeadLetter: a dead letter that its handler could not use; the
	// dead-letter path never produces dead letters, so it is dropped.
	JunkDeadLetter = "dead_letter"
	// JunkRunDropped: a request of a run cancelled with `medgym cancel
	// --drop` that no worker had started (the purge missed it in flight).
	JunkRunDropped = "run_dropped"
)

type junkError struct {
	reason string
	err    error
}

func (e junkError) Error() string { return e.err.Error() }
func (e junkError) Unwrap() error { return e.err }

// Junk marks err as caused by a message no handler could ever use (an
// undecodable body, a message for an unknown run or episode). Junk is
// acked, counted in medgym_messages_junk_total{reason} and logged at most
// once per JunkLogInterval per handler; it is never dead-lettered, so a
// flood of it cannot evict the dead letters that matter.
func Junk(reason string, err error) error {
	if err == nil {
		return nil
	}
	return junkError{reason: reason, err: err}
}

// Junkf is Junk(reason, fmt.Errorf(format, args...)).
func Junkf(reason, format string, args ...any) error {
	return Junk(reason, fmt.Errorf(format, args...))
}

// JunkReason returns the reason of a Junk error (or one it wraps).
func JunkReason(err error) (string, bool) {
	var j junkError
	if errors.As(err, &j) {
		return j.reason, true
	}
	return "", false
}

// IsJunk reports whether err (or any error it wraps) was marked Junk.
func IsJunk(err error) bool {
	_, ok := JunkReason(err)
	return ok
}
