package sandboxworker

import (
	"flag"
	"io"
	"testing"
)

func parseConfig(t *testing.T, getenv func(string) string, args ...string) (Config, error) {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// TestConfigFlags: the worker's main and `medgym run/serve` read the same
// flags into the same Config: sizes in MiB, -1 for no disk quota,
// --seccomp=false, and the environment fallbacks.
func TestConfigFlags(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig(t, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox.Limits.MemoryBytes != 2048<<20 || c.Sandbox.Limits.DiskBytes != 1024<<20 || c.Sandbox.Limits.DiskInodes != 100_000 || c.Sandbox.DisableSeccomp || c.Sandbox.RequireCgroups || c.Concurrency != 2 {
		t.Errorf("defaults: %+v", c)
	}
	c, err = parseConfig(t, noEnv, "--memory-mb=512", "--disk-mb=-1", "--disk-inodes=5000", "--seccomp=false", "--backend=docker", "--concurrency=3")
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox.Limits.MemoryBytes != 512<<20 || c.Sandbox.Limits.DiskBytes != -1 || c.Sandbox.Limits.DiskInodes != 5000 || !c.Sandbox.DisableSeccomp || c.Sandbox.Backend != "docker" || c.Concurrency != 3 {
		t.Errorf("flags: %+v", c)
	}
	env := map[string]string{"MEDGYM_AGENT_TREE": "/lib/agent", "MEDGYM_REQUIRE_CGROUPS": "1"}
	if c, _ = parseConfig(t, func(k string) string { return env[k] }); c.Sandbox.DataRoot != "/lib/agent" || !c.Sandbox.RequireCgroups {
		t.Errorf("environment: %+v", c)
	}
	for _, bad := range [][]string{{"--memory-mb=x"}, {"--warm=-1"}, {"--concurrency=-2"}, {"--seccomp=maybe"}, {"--disk-inodes=-1"}} {
		if _, err := parseConfig(t, noEnv, bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
