package schemas

import "testing"

// TestSharedMsgIDs: the ids publishers must agree on keep their recipe
// (a change would let a resubmitted run or a second result through the
// duplicate window of streams that already hold the old ids).
func TestSharedMsgIDs(t *testing.T) {
	if got := RunMsgID("r1"); got != "run/r1" {
		t.Errorf("RunMsgID = %q", got)
	}
	if got := ResultMsgID("r1--t-k0"); got != "r1--t-k0/result" {
		t.Errorf("ResultMsgID = %q", got)
	}
}
