package cli

import (
	"flag"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/dispatcher/dispatcher"
	"github.com/medgym/medgym/services/llm-worker/llmworker"
	"github.com/medgym/medgym/services/sandbox-worker/sandboxworker"
	"github.com/medgym/medgym/services/verifier/verifier"
)

func newTestFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// TestCLISetsEveryServiceOption: every flag of every service binary is a
// flag of `medgym run` (under the name componentFlags gives it) and sets
// the same Config field, or is one of the few the CLI sets itself.
func TestCLISetsEveryServiceOption(t *testing.T) {
	var f RunFlags
	fs := newTestFlagSet()
	f.Register(fs)
	comps := map[string]bus.Component{"dispatcher": &dispatcher.Config{}, "llm-worker": &llmworker.Config{},
		"sandbox-worker": &sandboxworker.Config{}, "verifier": &verifier.Config{}}
	if len(comps) != len(componentFlags) {
		t.Fatalf("componentFlags names %d services, the test %d", len(componentFlags), len(comps))
	}
	checked := 0
	for name, c := range comps {
		own := newTestFlagSet()
		c.RegisterFlags(own, func(string) string { return "" })
		cf := componentFlags[name]
		own.VisitAll(func(fl *flag.Flag) {
			if slices.Contains(cf.skip, fl.Name) {
				return
			}
			cli := cf.prefix + "-" + fl.Name
			if slices.Contains(cf.keep, fl.Name) {
				cli = fl.Name
			}
			if fs.Lookup(cli) == nil {
				t.Errorf("%s --%s: no --%s on medgym run", name, fl.Name, cli)
			}
			checked++
		})
	}
	if checked < 30 {
		t.Fatalf("only %d service flags checked", checked)
	}
	// The flags reach the configs the services run with.
	if err := fs.Parse([]string{"--graded-ml", "--sandbox-seccomp=false", "--llm-max-concurrent=3", "--dispatcher-tick=1s",
		"--verifier-batch-age=2s", "--data=/d", "--max-episodes=7"}); err != nil {
		t.Fatal(err)
	}
	d, l, s, v := f.Configs("http://m/v1")
	if !v.Scoring.GradedML || !s.Sandbox.DisableSeccomp || l.LLM.MaxConcurrent != 3 || d.Tick != time.Second || v.BatchAge != 2*time.Second ||
		d.DataRoot != "/d" || l.DataRoot != "/d" || v.DataRoot != "/d" || d.MaxEpisodes != 7 || l.LLM.DefaultBaseURL != "http://m/v1" {
		t.Errorf("configs: %+v\n%+v\n%+v\n%+v", d, l, s, v)
	}
}
