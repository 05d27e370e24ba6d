package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestCapReply: a reply at MaxReplyBytes is returned as is; one byte over,
// it is a format error (ErrReplyTooLong) that keeps the head and the tail
// around a marker and records the full size.
func TestCapReply(t *testing.T) {
	t.Parallel()
	at := strings.Repeat("a", MaxReplyBytes-2) + "}\n"
	if got, err := CapReply(at); err != nil || got != at {
		t.Fatalf("at the cap: %d bytes, %v; want it unchanged", len(got), err)
	}
	for _, n := range []int{MaxReplyBytes + 1, 20 << 20} {
		over := "HEAD" + strings.Repeat(`{"a":`, n/5) + "TAIL"
		got, err := CapReply(over)
		if !errors.Is(err, ErrReplyTooLong) || !strings.Contains(err.Error(), fmt.Sprint(len(over))) {
			t.Fatalf("%d bytes: %v; want ErrReplyTooLong with the size", len(over), err)
		}
		if len(got) > MaxReplyBytes+200 || !strings.HasPrefix(got, "HEAD") || !strings.HasSuffix(got, "TAIL") ||
			!strings.Contains(got, fmt.Sprintf("the full output was %d bytes", len(over))) {
			t.Fatalf("%d bytes kept as %d bytes (%q … %q): want head, marker with the size, tail", len(over), len(got), got[:10], got[len(got)-10:])
		}
	}
}

// TestParseWorkIsLinear: whatever the reply, Parse reads and decodes at most
// workPerByte·len + minWork bytes over all its candidates. Replies of
// objects that never close used to cost one pass per '{' (256 passes over
// 20 MB of `{"a":` took 70 s).
func TestParseWorkIsLinear(t *testing.T) {
	t.Parallel()
	valid := `{"action":"terminal","params":{"cmd":"ls"}}`
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"unclosed objects", strings.Repeat(`{"a":`, 400_000), false},
		{"unclosed strings", strings.Repeat(`{"a":"`, 300_000), false},
		{"unclosed triple quotes", strings.Repeat(`{"a":"""`, 200_000), false},
		{"bare braces", strings.Repeat("{", 1_000_000), false},
		{"mismatched", strings.Repeat("{]", 500_000), false},
		{"valid after an unclosed prefix", "{ note: " + valid, true},
		{"valid at the cap", `{"action":"validate_code","params":{"code":"` + strings.Repeat("#", MaxReplyBytes-60) + `"}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, work, err := parse(tc.in)
			if bound := workPerByte*len(tc.in) + minWork; work > bound {
				t.Errorf("%d bytes of work for a %d-byte reply, over the bound %d", work, len(tc.in), bound)
			}
			if tc.ok != (err == nil) {
				t.Errorf("Parse: %v, want ok %v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrBadJSON) {
				t.Errorf("Parse: %v, want ErrBadJSON", err)
			}
		})
	}
}
