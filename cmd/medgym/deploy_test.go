package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestComposeMountsTrees checks deploy/compose: the sandbox-worker mounts
// the library's agent tree and nothing else of it, and no service mounts
// the whole library (which holds the verifier tree); the verifier tree goes
// to the services that hold the answers.
func TestComposeMountsTrees(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "compose", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	sources := func(name string) []string {
		var out []string
		for _, v := range doc.Services[name].Volumes {
			out = append(out, strings.SplitN(v, ":", 2)[0])
		}
		return out
	}
	sb := doc.Services["sandbox-worker"]
	if len(sb.Volumes) == 0 || !slices.Contains(sb.Command, "--agent-tree") {
		t.Fatalf("sandbox-worker: command %v volumes %v: want --agent-tree and a mount", sb.Command, sb.Volumes)
	}
	for _, src := range sources("sandbox-worker") {
		if !strings.HasPrefix(src, "../../build/library/agent") {
			t.Errorf("sandbox-worker mounts %s: only the agent tree may be mounted", src)
		}
	}
	for name := range doc.Services {
		for _, src := range sources(name) {
			if strings.TrimRight(src, "/") == "../../build/library" {
				t.Errorf("%s mounts the whole library %s (with its verifier tree)", name, src)
			}
		}
	}
	for _, name := range []string{"dispatcher", "llm-worker", "verifier"} {
		if !slices.Contains(sources(name), "../../build/library/verifier") {
			t.Errorf("%s does not get the verifier tree: %v", name, sources(name))
		}
	}
}
