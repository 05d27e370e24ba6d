package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// offline lists a planted module on its own, with nothing fetched.
var offline = []string{"GOWORK=off", "GOFLAGS=-mod=readonly", "GOPROXY=off"}

// TestPlantedViolationsAreFound is the positive control: a service package
// importing NATS, a service's test importing another service, service
// packages depending on the task generators (directly, and through another
// package), and a trainer go.mod requiring a service are each reported.
func TestPlantedViolationsAreFound(t *testing.T) {
	pkgs, err := ListDeps(filepath.Join("testdata", "planted"), offline, "./...")
	if err != nil {
		t.Fatal(err)
	}
	got := CheckImports(pkgs)
	want := []Violation{
		{RuleNATS, Prefix + "services/planted/nats", "github.com/nats-io/nats.go"},
		{RuleCrossService, Prefix + "services/planted/cross", Prefix + "services/dispatcher/internal/dispatch"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("planted import violations:\n got %v\nwant %v", got, want)
	}
	got = CheckGenerators(pkgs)
	want = []Violation{
		{RuleGenerators, Prefix + "services/planted/gen", "modernc.org/sqlite"}, // through gen/loader
		{RuleGenerators, Prefix + "services/planted/gen/loader", "modernc.org/sqlite"},
		{RuleGenerators, Prefix + "services/planted/tasksgen", Prefix + "tasks/generate"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("planted generator dependencies:\n got %v\nwant %v", got, want)
	}
	pkgs, err = ListDeps(filepath.Join("testdata", "schemas"), offline, ".")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := CheckImports(pkgs), []Violation{{RuleSchemasStd, Prefix + "schemas", "github.com/apache/arrow-go/v18/arrow"}}; !slices.Equal(got, want) {
		t.Fatalf("planted schemas import:\n got %v\nwant %v", got, want)
	}
	mod, err := exec.Command("go", "mod", "edit", "-json", filepath.Join("testdata", "trainer", "go.mod")).Output()
	if err != nil {
		t.Fatal(err)
	}
	got, err = CheckTrainerRequires(mod)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Violation{{RuleTrainerMod, Prefix + "services/trainer", Prefix + "services/verifier"}}; !slices.Equal(got, want) {
		t.Fatalf("planted trainer requires:\n got %v\nwant %v", got, want)
	}
}

// TestOwner: test variants belong to the package they test.
func TestOwner(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/medgym/medgym/bus":                                          "github.com/medgym/medgym/bus",
		"github.com/medgym/medgym/bus [github.com/medgym/medgym/bus.test]":      "github.com/medgym/medgym/bus",
		"github.com/medgym/medgym/bus_test [github.com/medgym/medgym/bus.test]": "github.com/medgym/medgym/bus",
		"github.com/medgym/medgym/bus.test":                                     "github.com/medgym/medgym/bus",
	} {
		if got := owner(in); got != want {
			t.Errorf("owner(%q) = %q, want %q", in, got, want)
		}
	}
	if !inBus(Prefix+"bus/bustest") || inBus(Prefix+"busy") {
		t.Error("inBus is wrong about bus/bustest or busy")
	}
}

// workRoot is the directory of go.work above this package.
func workRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d
		}
	}
	t.Fatal("no go.work above the test directory")
	return ""
}

// TestArchitectureRules checks every module of go.work: the violations
// found must be exactly KnownViolations.
func TestArchitectureRules(t *testing.T) {
	if testing.Short() {
		t.Skip("lists every module's dependencies")
	}
	root := workRoot(t)
	out, err := exec.Command("go", "list", "-C", root, "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	dirs := strings.Fields(string(out))
	if len(dirs) < 10 {
		t.Fatalf("go.work lists %d modules: %v", len(dirs), dirs)
	}
	var pkgs []Package
	for _, dir := range dirs {
		p, err := ListDeps(dir, nil, "./...")
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p...)
	}
	got := append(CheckImports(pkgs), CheckGenerators(pkgs)...)
	mod, err := exec.Command("go", "mod", "edit", "-json", filepath.Join(root, "services", "trainer", "go.mod")).Output()
	if err != nil {
		t.Fatal(err)
	}
	tv, err := CheckTrainerRequires(mod)
	if err != nil {
		t.Fatal(err)
	}
	got = sortViolations(append(got, tv...))
	known := sortViolations(slices.Clone(KnownViolations))
	for _, v := range got {
		if !slices.Contains(known, v) {
			t.Errorf("architecture rule broken: %s", v)
		}
	}
	for _, v := range known {
		if !slices.Contains(got, v) {
			t.Errorf("known violation gone (delete it from KnownViolations): %s", v)
		}
	}
}
