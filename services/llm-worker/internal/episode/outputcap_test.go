package episode_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
)

// TestObservationsAreCapped: an output at the cap is stored as is; one over
// it keeps its head and its last line around a marker, the turn records the
// full sizes (the sandbox's, when it truncated first), and what the model
// is shown is the capped observation.
func TestObservationsAreCapped(t *testing.T) {
	limit := schemas.MaxStoredOutputBytes
	for _, tc := range []struct {
		name       string
		stdout     string
		full       int64 // reported by the sandbox (0: len)
		wantCapped bool
	}{
		{"at the cap", strings.Repeat("a", limit-3) + "42\n", 0, false},
		{"one byte over", strings.Repeat("a", limit-2) + "42\n", 0, true},
		{"300 KB, sandbox-truncated", strings.Repeat("é", 128<<10) + "\n...[output truncated: 44 more bytes not shown]\n42\n", 300_000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := func(a schemas.ActionRequest) (schemas.ExecResult, bool) {
				return schemas.ExecResult{Status: schemas.StatusOK, Stdout: tc.stdout, StdoutBytes: tc.full, Message: tc.stdout}, false
			}
			req := request(func(o *schemas.EpisodeOptions) { o.MaxTurns = 1 })
			st, _ := play(t, engine(script{code("print(42)")}), req, sb)
			tr := st.Result.Turns[0]
			full := max(tc.full, int64(len(tc.stdout)))
			if tr.StdoutBytes != full || tr.ObservationBytes != int64(len(tc.stdout)) {
				t.Errorf("recorded sizes stdout %d, observation %d; want %d, %d", tr.StdoutBytes, tr.ObservationBytes, full, len(tc.stdout))
			}
			marker := fmt.Sprintf("the full output was %d bytes", full)
			for name, got := range map[string]string{"stdout": tr.Stdout, "observation": tr.Observation} {
				if !tc.wantCapped {
					if got != tc.stdout {
						t.Errorf("%s changed under the cap", name)
					}
					continue
				}
				if len(got) > limit+200 || !strings.HasSuffix(got, "42\n") || !strings.HasPrefix(got, tc.stdout[:100]) {
					t.Errorf("%s: %d bytes, ends %q: want ≤ cap + marker, head and last line kept", name, len(got), got[max(0, len(got)-20):])
				}
				if name == "stdout" && !strings.Contains(got, marker) {
					t.Errorf("%s has no marker %q", name, marker)
				}
				if strings.ToValidUTF8(got, "?") != got {
					t.Errorf("%s is not valid UTF-8 after the cut", name)
				}
			}
			if !tc.wantCapped {
				return
			}
			if !tr.Truncated {
				t.Error("capped turn not marked truncated")
			}
			if m := st.Result.Messages[3].Content; m != tr.Observation {
				t.Errorf("the model was shown %d bytes, not the stored observation (%d)", len(m), len(tr.Observation))
			}
		})
	}
}
