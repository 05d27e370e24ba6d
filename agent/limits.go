package agent

import (
	"fmt"

	"github.com/medgym/medgym/schemas"
)

// MaxReplyBytes caps one model reply (its text, and separately its
// reasoning). A longer reply is not parsed: it is a format error
// (ErrReplyTooLong), and what is kept of it, in the trajectory and in the
// conversation sent back to the model, is its head and tail around a marker
// that gives the full size (schemas.CapText). 256 KiB is about 64k tokens,
// past any program an action needs.
const MaxReplyBytes = 256 << 10

// MaxConversationBytes caps the conversation sent to the model in one
// request: the content of every message, in bytes. An episode whose
// conversation outgrows it ends as a context overflow instead of sending
// it (about 500k tokens, past every common model's context). With
// observations capped at schemas.MaxStoredOutputBytes and replies at
// MaxReplyBytes, only long replies get there.
const MaxConversationBytes = 2 << 20

// CapReply applies MaxReplyBytes to a reply: under the cap it returns text
// unchanged and nil; over it, the capped text and an error wrapping
// ErrReplyTooLong that gives the full size.
func CapReply(text string) (string, error) {
	if len(text) <= MaxReplyBytes {
		return text, nil
	}
	kept, full := schemas.CapText(text, 0, MaxReplyBytes)
	return kept, fmt.Errorf("%w: %d bytes, over the %d-byte cap; it was not read", ErrReplyTooLong, full, MaxReplyBytes)
}

// ConversationBytes is the size MaxConversationBytes bounds: the total
// content of msgs.
func ConversationBytes(msgs []schemas.ChatMessage) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	return n
}
