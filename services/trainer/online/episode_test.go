package online

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/medgym/medgym/schemas"
)

// TestEpisodeRuleIsNoOracle: the runs the online trainer samples take
// medgym's default episode rule (end_on answer, no verdict shown: no code
// run is checked before the policy commits, so the reward cannot be earned
// by printing candidates until one ends the episode); given options are
// read over those defaults, and episode.compat upstream gives upstream's
// rule.
func TestEpisodeRuleIsNoOracle(t *testing.T) {
	base := `{"nats": "nats://x", "store": "/s", "work_dir": "/w", "iterations": 1, "datasets": ["medcalcbench"], "samples": 2, ` +
		`"serving": {"base_url": "http://vllm/v1", "base_model": "m"}`
	up := schemas.UpstreamOptions()
	five := schemas.DefaultOptions()
	five.MaxTurns = 5
	for _, c := range []struct {
		episode string
		want    schemas.EpisodeOptions
	}{
		{"", schemas.DefaultOptions()},
		{`, "episode": {"max_turns": 5}`, five},
		{`, "episode": {"compat": "upstream"}`, up},
	} {
		path := filepath.Join(t.TempDir(), "c.json")
		if err := os.WriteFile(path, []byte(base+c.episode+"}"), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(path)
		if err != nil {
			t.Fatalf("%q: %v", c.episode, err)
		}
		l := New(cfg, nil, nil, nil, nil)
		for _, spec := range []schemas.RunSpec{l.spec(0, "m", 0), l.spec(3, "m-v3", 3)} {
			if !reflect.DeepEqual(spec.Options, c.want) {
				t.Fatalf("%q: the iteration's run has options %+v, want %+v", c.episode, spec.Options, c.want)
			}
		}
	}
	if o := schemas.DefaultOptions(); o.EndOn != schemas.EndOnAnswer || o.ShowVerdict {
		t.Fatalf("default options %+v", o)
	}
}
