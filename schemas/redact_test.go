package schemas

import (
	"os"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:s3cret@nats:4222", "nats://REDACTED@nats:4222"},
		{"nats://tok3n@nats:4222", "nats://REDACTED@nats:4222"},
		{"nats://a:pw1@h1:4222,nats://b:pw2@h2:4222", "nats://REDACTED@h1:4222,nats://REDACTED@h2:4222"},
		{"https://u:p%40ss@vllm:8000/v1", "https://REDACTED@vllm:8000/v1"},
		{"http://u:pa/ss@vllm:8000/v1", "http://REDACTED@vllm:8000/v1"},
		{"http://vllm:8000/v1?x=a@b", "http://vllm:8000/v1?x=a@b"},
		{"", ""},
	} {
		got := RedactURL(tc.in)
		if got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"s3cret", "tok3n", "pw1", "pw2", "p%40ss", "pa/ss"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactURL(%q) = %q keeps %q", tc.in, got, secret)
			}
		}
		if HasUserinfo(tc.in) != (got != tc.in) {
			t.Errorf("HasUserinfo(%q) = %v", tc.in, HasUserinfo(tc.in))
		}
	}
}

func TestValidateBounds(t *testing.T) {
	base := func() RunSpec {
		return RunSpec{RunID: "r1", Datasets: []string{"medcalcbench"}, Samples: 1,
			Policy: PolicySpec{Name: PolicyReference}, Options: DefaultOptions()}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	f := func(v float64) *float64 { return &v }
	bad := map[string]func(*RunSpec){
		"limit -1":                 func(s *RunSpec) { s.Limit = -1 },
		"temperature -0.1":         func(s *RunSpec) { s.Temperatures = []float64{0, -0.1} },
		"temperature 2.5":          func(s *RunSpec) { s.Temperatures = []float64{2.5} },
		"policy temperature 9":     func(s *RunSpec) { s.Policy.Temperature = f(9) },
		"top_p 0":                  func(s *RunSpec) { s.Policy.TopP = f(0) },
		"action timeout overflows": func(s *RunSpec) { s.Options.ActionTimeoutSec = 9300000000 },
		"episode timeout negative": func(s *RunSpec) { s.Options.EpisodeTimeoutSec = -5 },
		"loop guard unknown":       func(s *RunSpec) { s.Options.LoopGuard = "sometimes" },
		"max in flight negative":   func(s *RunSpec) { s.MaxInFlight = -1 },
		"credentials in base url": func(s *RunSpec) {
			s.Policy = PolicySpec{Name: PolicyOpenAI, Model: "m", BaseURL: "http://u:s3cr3t-pw@vllm:8000/v1"}
		},
	}
	for name, mut := range bad {
		s := base()
		mut(&s)
		err := s.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t-pw") {
			t.Errorf("%s: error leaks the password: %v", name, err)
		}
	}
	ok := base()
	ok.Temperatures = []float64{0, 0.6, 2}
	ok.Options.ActionTimeoutSec = MaxActionTimeoutSec
	if err := ok.Validate(); err != nil {
		t.Errorf("bounds themselves: %v", err)
	}
}

func TestSecret(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/key"
	if err := os.WriteFile(path, []byte("sk-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"A_KEY": "sk-from-env", "B_KEY_FILE": path, "C_KEY_FILE": dir + "/missing"}
	getenv := func(k string) string { return env[k] }
	for name, want := range map[string]string{"A_KEY": "sk-from-env", "B_KEY": "sk-from-file", "D_KEY": ""} {
		got, err := Secret(getenv, name)
		if err != nil || got != want {
			t.Errorf("Secret(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := Secret(getenv, "C_KEY"); err == nil {
		t.Error("a secret file that does not exist: no error")
	}
}
