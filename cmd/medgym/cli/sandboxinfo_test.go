package cli

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestSandboxInfo: `medgym sandbox info` reports the isolation a run gets
// from inside it: uid 65534, loopback only, seccomp filtering, no
// capabilities, only /work and /tmp writable, none of the worker's
// environment, and which limits are in force.
func TestSandboxInfo(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "medgym-fake-secret")
	backends := []string{"bwrap"}
	if os.Getenv("MEDGYM_DOCKER") == "1" {
		backends = append(backends, "docker")
	}
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			out, errOut, err := runCLI(t, "sandbox", "info", "--backend", b)
			if err != nil {
				t.Fatalf("sandbox info: %v\n%s", err, errOut)
			}
			var info struct {
				Backend, Limits string
				DiskQuota       string `json:"disk_quota"`
				Seccomp         bool
				Probe           struct {
					UID           int      `json:"uid"`
					Seccomp       int      `json:"seccomp"`
					CapEff        string   `json:"cap_eff"`
					NetInterfaces []string `json:"net_interfaces"`
					Writable      []string `json:"writable"`
					Env           []string `json:"env"`
				}
			}
			if err := json.Unmarshal([]byte(out), &info); err != nil {
				t.Fatalf("output %q: %v", out, err)
			}
			p := info.Probe
			if info.Backend != b || !info.Seccomp || (info.DiskQuota != "project" && info.DiskQuota != "watcher") || p.UID != 65534 || p.Seccomp != 2 || strings.Trim(p.CapEff, "0") != "" {
				t.Fatalf("info %+v", info)
			}
			if !slices.Equal(p.NetInterfaces, []string{"lo"}) {
				t.Fatalf("network interfaces %v, want only lo", p.NetInterfaces)
			}
			for _, w := range p.Writable {
				if w != "/work" && w != "/tmp" {
					t.Fatalf("%s is writable in the sandbox", w)
				}
			}
			if slices.Contains(p.Env, "AWS_SECRET_ACCESS_KEY") || len(p.Env) == 0 {
				t.Fatalf("sandbox environment %v", p.Env)
			}
			want := map[string]bool{"cgroup-v1": true, "cgroup-v2": true}
			if b == "docker" {
				want = map[string]bool{"docker": true}
			} else if os.Getenv("CI") != "true" || os.Geteuid() != 0 {
				want["rlimits"] = true
			}
			if !want[info.Limits] {
				t.Fatalf("limits %q, want one of %v", info.Limits, want)
			}
		})
	}
}
