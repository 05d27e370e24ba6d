package verify

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// goldenCase is one row of testdata/golden.json: one output (or explicit
// answer) checked under both modes.
type goldenCase struct {
	Name     string              `json:"name"`
	Note     string              `json:"note"`
	Dataset  string              `json:"dataset"`
	Truth    tasks.Truth         `json:"truth"`
	Result   *schemas.ExecResult `json:"result"`
	Answer   *string             `json:"answer"`
	Strict   goldenWant          `json:"strict"`
	Upstream goldenWant          `json:"upstream"`
}

type goldenWant struct {
	Accepted bool    `json:"accepted"`
	Answer   *string `json:"answer"`
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	b, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var cases []goldenCase
	if err := dec.Decode(&cases); err != nil {
		t.Fatalf("decode golden.json: %v", err)
	}
	for _, c := range cases {
		if (c.Result == nil) == (c.Answer == nil) {
			t.Fatalf("golden case %q: exactly one of result and answer must be set", c.Name)
		}
	}
	return cases
}

func TestGolden(t *testing.T) {
	t.Parallel()
	cases := loadGolden(t)
	datasets := map[string]bool{}
	for _, c := range cases {
		datasets[c.Dataset] = true
		for _, m := range []struct {
			mode Mode
			want goldenWant
		}{{Strict, c.Strict}, {Upstream, c.Upstream}} {
			t.Run(string(m.mode)+"/"+c.Name, func(t *testing.T) {
				t.Parallel()
				var got schemas.Check
				if c.Result != nil {
					got = checkOutput(m.mode, c.Dataset, c.Truth, *c.Result)
				} else {
					got = CheckAnswer(m.mode, c.Dataset, c.Truth, *c.Answer)
				}
				if got.Accepted != m.want.Accepted {
					t.Errorf("accepted = %t, want %t (verdict %q; %s)", got.Accepted, m.want.Accepted, got.Verdict, c.Note)
				}
				if m.want.Answer != nil && got.Answer != *m.want.Answer {
					t.Errorf("answer = %q, want %q", got.Answer, *m.want.Answer)
				}
				if got.Verdict == "" {
					t.Error("empty verdict")
				}
				if got.VerifierVersion != VersionFor(m.mode) {
					t.Errorf("version = %q, want %q", got.VerifierVersion, VersionFor(m.mode))
				}
			})
		}
	}
	// Every dataset with an upstream rule has golden rows.
	for _, d := range UpstreamDatasets() {
		if !datasets[d] {
			t.Errorf("no golden case for dataset %q", d)
		}
	}
}

// TestGoldenKnownFalsePositives pins the upstream bugs the brief lists: each
// is accepted by upstream-compat and rejected by strict.
func TestGoldenKnownFalsePositives(t *testing.T) {
	t.Parallel()
	want := []string{
		"medcalc/any-positive-number",
		"mimic/gold-1-output-10-rows",
		"seqsql/crash",
		"biodsbench/wrong-program-runs",
		"mimic/crash-traceback-contains-answer",
		"predictions/one-patient-right",
	}
	byName := map[string]goldenCase{}
	for _, c := range loadGolden(t) {
		byName[c.Name] = c
	}
	for _, n := range want {
		c, ok := byName[n]
		if !ok {
			t.Errorf("golden case %q missing", n)
			continue
		}
		if c.Strict.Accepted || !c.Upstream.Accepted {
			t.Errorf("golden case %q: want strict reject and upstream accept", n)
		}
	}
}
