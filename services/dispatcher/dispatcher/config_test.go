package dispatcher

import (
	"flag"
	"io"
	"testing"
	"time"
)

// TestConfigFlags: the dispatcher's main and `medgym run/serve` read the
// same flags; a bad --max-episodes or MEDGYM_MAX_EPISODES is an error,
// not the default.
func TestConfigFlags(t *testing.T) {
	parse := func(env map[string]string, args ...string) (Config, error) {
		var c Config
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs, func(k string) string { return env[k] })
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		return c, c.Validate()
	}
	c, err := parse(map[string]string{"MEDGYM_MAX_EPISODES": "50", "MEDGYM_DATA": "/d"}, "--tick=1s")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxEpisodes != 50 || c.DataRoot != "/d" || c.Tick != time.Second {
		t.Errorf("config %+v", c)
	}
	if c, _ := parse(nil, "--max-episodes=7"); c.MaxEpisodes != 7 {
		t.Errorf("--max-episodes 7: %d", c.MaxEpisodes)
	}
	for _, bad := range []struct {
		env  string
		args []string
	}{{"x", nil}, {"0", nil}, {"", []string{"--max-episodes=0"}}, {"", []string{"--tick=-1s"}}} {
		if _, err := parse(map[string]string{"MEDGYM_MAX_EPISODES": bad.env}, bad.args...); err == nil {
			t.Errorf("MEDGYM_MAX_EPISODES=%q %v accepted", bad.env, bad.args)
		}
	}
}
