package online_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/services/trainer/online"
)

// TestConfigServing: an online run needs an engine: serving.base_url, or a
// resident worker, which then serves the policy itself (serving.listen is
// only for that case).
func TestConfigServing(t *testing.T) {
	base := `{"nats": "nats://x", "store": "/s", "work_dir": "/w", "iterations": 1, "datasets": ["medcalcbench"], "samples": 2, `
	for _, c := range []struct{ serving, train, err string }{
		{`{"base_url": "http://vllm/v1", "base_model": "m"}`, `{}`, ""},
		{`{"base_model": "m"}`, `{}`, "serving.base_url is required unless train.resident"},
		{`{"base_model": "m", "listen": "0.0.0.0:8000"}`, `{"resident": ["python", "worker.py"]}`, ""},
		{`{"base_url": "http://vllm/v1", "base_model": "m", "listen": ":1"}`, `{"resident": ["python", "worker.py"]}`, "serving.listen is for"},
		{`{"base_url": "http://vllm/v1"}`, `{}`, "serving.base_model is required"},
	} {
		path := filepath.Join(t.TempDir(), "c.json")
		if err := os.WriteFile(path, []byte(base+`"serving": `+c.serving+`, "train": `+c.train+`}`), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := online.LoadConfig(path)
		if c.err == "" {
			if err != nil {
				t.Fatalf("%s %s: %v", c.serving, c.train, err)
			}
			if want := cfg.Serving.BaseURL == ""; cfg.ServesFromWorker() != want {
				t.Fatalf("%s: serves from the worker %v", c.serving, cfg.ServesFromWorker())
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Fatalf("%s %s: %v, want %q", c.serving, c.train, err, c.err)
		}
	}
}
