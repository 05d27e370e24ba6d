package schemas

import (
	"fmt"
	"unicode/utf8"
)

// CapStored caps s at MaxStoredOutputBytes, the form in which turns store
// outputs: the first and last halves stay (the end of an output usually
// holds the answer or the traceback), joined by a visible marker that gives
// the full size. full is the size the producer reported before its own cap
// (0: len(s)); the second result is the full size to record.
func CapStored(s string, full int64) (string, int64) {
	return CapText(s, full, MaxStoredOutputBytes)
}

// CapText is CapStored with another limit (the agent's reply cap).
func CapText(s string, full int64, limit int) (string, int64) {
	full = max(full, int64(len(s)))
	if len(s) <= limit {
		return s, full
	}
	half := limit / 2
	head := half
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - half
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	marker := fmt.Sprintf("\n...[output capped: %d bytes not stored here; the full output was %d bytes]...\n", tail-head, full)
	return s[:head] + marker + s[tail:], full
}
