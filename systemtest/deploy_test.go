package systemtest

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeVar is compose's variable syntax, ${NAME} or ${NAME:-default}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// composeFileDefaults reads deploy/compose/compose.yaml as compose reads it
// with none of its variables set: each ${NAME:-default} is its default. A
// variable without a default fails the test (compose would leave it empty).
func composeFileDefaults(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "compose", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return composeVar.ReplaceAllFunc(raw, func(m []byte) []byte {
		sub := composeVar.FindSubmatch(m)
		if !bytes.Contains(m, []byte("-")) {
			t.Errorf("compose.yaml: %s has no default", m)
		}
		return sub[2]
	})
}

// TestComposeMountsTrees checks deploy/compose: the sandbox-worker mounts
// the library's agent tree and nothing else of it, and no service mounts
// the whole library (which holds the verifier tree); the verifier tree goes
// to the services that hold the answers.
func TestComposeMountsTrees(t *testing.T) {
	raw := composeFileDefaults(t)
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

// TestComposeExposesLittleAndHoldsNoSecret (issue 13 item 10): the compose
// file committed MINIO_ROOT_PASSWORD and published every port on all of the
// host's interfaces. Now ports are published on 127.0.0.1 only, credentials
// come from secret files, and every service's metrics bind its own
// container address.
func TestComposeExposesLittleAndHoldsNoSecret(t *testing.T) {
	b := composeFileDefaults(t)
	var c struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
			Hostname    string            `yaml:"hostname"`
		} `yaml:"services"`
		Secrets map[string]struct {
			File string `yaml:"file"`
		} `yaml:"secrets"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Services) < 6 {
		t.Fatalf("%d services parsed", len(c.Services))
	}
	for name, s := range c.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q on every host interface", name, p)
			}
		}
		for k, v := range s.Environment {
			secretish := strings.Contains(k, "PASSWORD") || strings.Contains(k, "SECRET") || strings.Contains(k, "KEY") || strings.Contains(k, "TOKEN")
			if secretish && !strings.HasSuffix(k, "_FILE") {
				t.Errorf("%s: %s=%q: credentials belong in a secret file (%s_FILE)", name, k, v, k)
			}
			if strings.HasSuffix(k, "_FILE") && !strings.HasPrefix(v, "/run/secrets/") {
				t.Errorf("%s: %s=%q is not a mounted secret", name, k, v)
			}
		}
		cmd := strings.Join(s.Command, " ")
		if strings.HasPrefix(s.Command[0], "dispatcher") || strings.Contains(cmd, "-worker") || s.Command[0] == "verifier" {
			if s.Hostname == "" || !strings.Contains(cmd, "--metrics "+s.Hostname+":") {
				t.Errorf("%s: metrics not bound to its own container address (hostname %q): %s", name, s.Hostname, cmd)
			}
		}
	}
	for name, s := range c.Secrets {
		if !strings.HasPrefix(s.File, "./secrets/") {
			t.Errorf("secret %s from %q, want the git-ignored ./secrets/", name, s.File)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot(t), ".gitignore"))
	if err != nil || !strings.Contains(string(ignore), "/deploy/compose/secrets/") {
		t.Errorf(".gitignore does not keep deploy/compose/secrets out of git (%v)", err)
	}
}
