package llmworker

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestConfigFlags: the worker's main and `medgym run/serve` read the same
// flags into the same Config, API keys from the given environment, and a
// negative retry count (once silently a default) is refused.
func TestConfigFlags(t *testing.T) {
	parse := func(args ...string) (Config, error) {
		var c Config
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs, func(k string) string { return map[string]string{"MEDGYM_LLM_URL": "http://u:pw@m/v1"}[k] })
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		return c, c.Validate()
	}
	c, err := parse("--llm-retries=0", "--llm-max-concurrent=3", "--system-as-user", "--debugger-model=d")
	if err != nil {
		t.Fatal(err)
	}
	if c.LLM.DefaultBaseURL != "http://u:pw@m/v1" || c.LLM.MaxRetries != 0 || c.LLM.MaxConcurrent != 3 || !c.SystemAsUser ||
		c.Debugger.Model != "d" || c.LLM.Timeout != 5*time.Minute || c.Concurrency != 32 || c.LLM.Getenv == nil {
		t.Errorf("flags: %+v", c)
	}
	if got := c.LogValue().String(); strings.Contains(got, "pw") {
		t.Errorf("credentials logged: %s", got)
	}
	if _, err := parse("--llm-retries=-1"); err == nil || !strings.Contains(err.Error(), "--llm-retries") {
		t.Errorf("--llm-retries -1: %v", err)
	}
}
