package env

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigBindsLoopback: the default address is loopback; another one
// is refused without a token and accepted with one; the token comes from
// the environment or its file, never a flag.
func TestConfigBindsLoopback(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	parse := func(args ...string) Config {
		var c Config
		fs := flag.NewFlagSet("env", flag.ContinueOnError)
		c.RegisterFlags(fs, getenv)
		if err := fs.Parse(append([]string{"--views", "v"}, args...)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse()
	if c.Addr != DefaultAddr || !strings.HasPrefix(c.Addr, "127.0.0.1:") || c.Validate() != nil {
		t.Fatalf("default: %q (%v)", c.Addr, c.Validate())
	}
	if err := parse("--addr", "0.0.0.0:8420").Validate(); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("0.0.0.0 without a token: %v", err)
	}
	// Open on purpose (a public hub deployment): said in a flag of its own.
	if c := parse("--addr", "0.0.0.0:8420", "--no-token"); c.Validate() != nil || !strings.Contains(c.LogValue().String(), "no_token=true") {
		t.Fatalf("0.0.0.0 with --no-token: %v %s", c.Validate(), c.LogValue())
	}
	f := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(f, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env["MEDGYM_ENV_TOKEN_FILE"] = f
	c = parse("--addr", "0.0.0.0:8420")
	if c.Token != "s3cret" || c.Validate() != nil {
		t.Fatalf("token file: %q (%v)", c.Token, c.Validate())
	}
	if strings.Contains(c.LogValue().String(), "s3cret") {
		t.Fatal("the token is logged")
	}
	if err := parse("--addr", "0.0.0.0:8420", "--no-token").Validate(); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Fatalf("--no-token with a token: %v", err)
	}
	env["MEDGYM_ENV_TOKEN_FILE"] = filepath.Join(t.TempDir(), "missing")
	if err := parse().Validate(); err == nil {
		t.Fatal("an unreadable token file was accepted")
	}
	if fs := flag.NewFlagSet("x", flag.ContinueOnError); true {
		var c Config
		c.RegisterFlags(fs, getenv)
		if fs.Lookup("token") != nil {
			t.Fatal("the token is a flag")
		}
	}
}

// TestConfigEndOn: sessions that name no end_on get answer unless the
// server is told otherwise; a rule the episode options refuse is refused.
func TestConfigEndOn(t *testing.T) {
	parse := func(args ...string) Config {
		var c Config
		fs := flag.NewFlagSet("env", flag.ContinueOnError)
		c.RegisterFlags(fs, func(string) string { return "" })
		if err := fs.Parse(append([]string{"--views", "v"}, args...)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := parse(); c.EndOn != "answer" || c.Validate() != nil {
		t.Fatalf("default end_on %q (%v)", c.EndOn, c.Validate())
	}
	if c := parse("--end-on", "both"); c.EndOn != "both" || c.Validate() != nil {
		t.Fatalf("--end-on both: %q (%v)", c.EndOn, c.Validate())
	}
	if err := parse("--end-on", "never").Validate(); err == nil || !strings.Contains(err.Error(), "end_on") {
		t.Fatalf("--end-on never: %v", err)
	}
}
