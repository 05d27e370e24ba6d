package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSpecFileAndOverrides(t *testing.T) {
	root := filepath.Join("..", "..", "..") // the repository root
	spec, err := loadSpecFile(filepath.Join(root, "deploy", "specs", "medcalc-pass-at-4.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if spec.Samples != 4 || len(spec.Temperatures) != 2 || spec.Temperatures[1] != 0.6 || spec.Policy.Model != "Qwen/Qwen2.5-7B-Instruct" || !spec.Policy.Logprobs {
		t.Fatalf("spec not read faithfully: %+v", spec)
	}
	var f RunFlags
	fs := newTestFlagSet()
	f.Register(fs)
	if err := fs.Parse([]string{"--samples", "2", "--llm-url", "http://x/v1", "--seed", "7"}); err != nil {
		t.Fatal(err)
	}
	fromFlags, _ := f.Spec()
	got := overlay(fs, spec, fromFlags)
	if got.Samples != 2 || got.Policy.BaseURL != "http://x/v1" || got.Policy.Seed == nil || *got.Policy.Seed != 7 {
		t.Fatalf("explicit flags must override: samples %d url %q seed %v", got.Samples, got.Policy.BaseURL, got.Policy.Seed)
	}
	if got.Limit != 100 || got.RunID != "medcalc-pass4" || got.Policy.Model != "Qwen/Qwen2.5-7B-Instruct" {
		t.Fatalf("unset flags must not override the file: %+v", got)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("datasets: [medcalcbench]\nsampels: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadSpecFile(bad); err == nil || !strings.Contains(err.Error(), "sampels") {
		t.Fatalf("unknown key: err = %v, want one naming it", err)
	}
}
