package verify

import (
	"regexp"
	"slices"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Mode{"": Strict, "strict": Strict, " Strict ": Strict, "upstream": Upstream, "UPSTREAM": Upstream} {
		got, err := ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"lenient", "upstream-compat", "x"} {
		if _, err := ParseMode(in); err == nil {
			t.Errorf("ParseMode(%q): want an error", in)
		}
	}
}

// The schemas contract and this package must agree on the mode names.
func TestModesMatchSchemas(t *testing.T) {
	t.Parallel()
	for _, m := range []Mode{Strict, Upstream} {
		o := schemas.DefaultOptions()
		o.VerifierMode = string(m)
		if err := o.Validate(); err != nil {
			t.Errorf("schemas rejects mode %q: %v", m, err)
		}
	}
	if m, err := ParseMode(schemas.DefaultOptions().VerifierMode); err != nil || m != Strict {
		t.Errorf("default options mode = %q, %v; want strict", m, err)
	}
}

func TestVersionFor(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^\d+\.\d+\.\d+\+(strict|upstream)\.[0-9a-f]{8}$`)
	s, u := VersionFor(Strict), VersionFor(Upstream)
	for _, v := range []string{s, u} {
		if !re.MatchString(v) {
			t.Errorf("version %q does not match %s", v, re)
		}
	}
	if s == u {
		t.Errorf("strict and upstream share version %q", s)
	}
	if VersionFor("") != s {
		t.Errorf("VersionFor(\"\") = %q, want the strict version %q", VersionFor(""), s)
	}
	if VersionFor(Strict) != s {
		t.Error("VersionFor is not stable")
	}
	if got := VersionFor("bogus"); got != RulesSemver+"+invalid" {
		t.Errorf("VersionFor(bogus) = %q", got)
	}
	// Every rule file is embedded and hashed.
	for m, files := range ruleFiles {
		for _, f := range files {
			if b, err := ruleSource.ReadFile(f); err != nil || len(b) == 0 {
				t.Errorf("mode %s: rule file %s not embedded: %v", m, f, err)
			}
		}
	}
}

func TestUnknownModeRejects(t *testing.T) {
	t.Parallel()
	truth := tasks.Truth{Type: schemas.AnswerNumber, Answer: "1"}
	if c := checkOutput("bogus", "medcalcbench", truth, stdout("1")); c.Accepted || c.Verdict == "" {
		t.Errorf("checkOutput(bogus mode) = %+v", c)
	}
	if c := CheckAnswer("bogus", "medcalcbench", truth, "1"); c.Accepted || c.Verdict == "" {
		t.Errorf("CheckAnswer(bogus mode) = %+v", c)
	}
	if c := checkOutput("", "medcalcbench", truth, stdout("1")); !c.Accepted || c.VerifierVersion != VersionFor(Strict) {
		t.Errorf("checkOutput(\"\" mode) = %+v, want strict acceptance", c)
	}
}

func TestUpstreamDatasets(t *testing.T) {
	t.Parallel()
	got := UpstreamDatasets()
	want := []string{"biocoder", "biodsbench", "ehr_seqsql", "ehrcon", "eicu", "medcalcbench", "mimic_iii", "npowerai", "treqs"}
	if !slices.Equal(got, want) {
		t.Errorf("UpstreamDatasets() = %v, want %v", got, want)
	}
}
