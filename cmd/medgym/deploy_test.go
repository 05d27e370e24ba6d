package main

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestComposeExposesLittleAndHoldsNoSecret (issue 13 item 10): the compose
// file committed MINIO_ROOT_PASSWORD and published every port on all of the
// host's interfaces. Now ports are published on 127.0.0.1 only, credentials
// come from secret files, and every service's metrics bind its own
// container address.
func TestComposeExposesLittleAndHoldsNoSecret(t *testing.T) {
	b, err := os.ReadFile("../../deploy/compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
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
	ignore, err := os.ReadFile("../../.gitignore")
	if err != nil || !strings.Contains(string(ignore), "/deploy/compose/secrets/") {
		t.Errorf(".gitignore does not keep deploy/compose/secrets out of git (%v)", err)
	}
}
