package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
)

// TestUpstreamCompatFlagsAndSpec: --upstream-compat sets upstream's
// options, refuses a flag that contradicts them, and a spec file's
// options.compat fills in the options it leaves out.
func TestUpstreamCompatFlagsAndSpec(t *testing.T) {
	var f RunFlags
	fs := newTestFlagSet()
	f.Register(fs)
	if err := fs.Parse([]string{"--upstream-compat"}); err != nil {
		t.Fatal(err)
	}
	spec, err := f.Spec()
	if err != nil || !reflect.DeepEqual(spec.Options, schemas.UpstreamOptions()) {
		t.Fatalf("--upstream-compat: %+v, %v", spec.Options, err)
	}
	for _, extra := range [][]string{{"--end-on", "both"}, {"--max-turns", "30"}, {"--verifier-mode", "strict"}, {"--show-verdict"}} {
		_, _, err := runCLI(t, append([]string{"run", "--upstream-compat"}, extra...)...)
		if err == nil || !strings.Contains(err.Error(), extra[0]) || !strings.Contains(err.Error(), "--upstream-compat") {
			t.Errorf("%v: %v", extra, err)
		}
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "up.yaml")
	if err := os.WriteFile(good, []byte("datasets: [medcalcbench]\noptions:\n  compat: upstream\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := loadSpecFile(good); err != nil || !reflect.DeepEqual(s.Options, schemas.UpstreamOptions()) || s.Options.Validate() != nil {
		t.Fatalf("compat spec: %+v, %v", s.Options, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("run_id: x\ndatasets: [medcalcbench]\npolicy: {name: reference}\noptions:\n  compat: upstream\n  end_on: both\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := loadSpecFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "compat upstream requires end_on accepted") {
		t.Errorf("contradicting spec: %v", err)
	}
	// A spec written before the field keeps medgym's rules, and the end_on
	// it names (the default changed to answer in contract 1.4).
	old := filepath.Join(dir, "old.yaml")
	if err := os.WriteFile(old, []byte("datasets: [medcalcbench]\noptions:\n  end_on: both\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := schemas.DefaultOptions()
	want.EndOn = schemas.EndOnBoth
	if s, err := loadSpecFile(old); err != nil || s.Options.Upstream() || !reflect.DeepEqual(s.Options, want) {
		t.Errorf("old spec: %+v, %v", s.Options, err)
	}
}
