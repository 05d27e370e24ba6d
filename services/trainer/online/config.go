package online

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/trainer/worker"
)

// Config is the online loop's configuration file (JSON, or YAML with the
// same keys).
type Config struct {
	// NATS is the server URL of a running pipeline.
	NATS string `json:"nats"`
	// Store is the trajectory store the verifier writes (directory or
	// s3://bucket/prefix; S3 credentials from the AWS_* environment).
	Store string `json:"store"`
	// WorkDir holds the state file, batches, metrics and adapters.
	WorkDir string `json:"work_dir"`
	// RunPrefix names the runs: <run_prefix>-it0000, -it0001, ...
	RunPrefix  string `json:"run_prefix"`
	Iterations int    `json:"iterations"`

	Datasets []string `json:"datasets"`
	Split    string   `json:"split"`
	TaskIDs  []string `json:"task_ids,omitempty"`
	// TasksPerIteration, with TaskIDs, gives each iteration the next window
	// of that many tasks (wrapping), so iterations see fresh prompts.
	TasksPerIteration int   `json:"tasks_per_iteration,omitempty"`
	Limit             int   `json:"limit,omitempty"`
	SampleSeed        int64 `json:"sample_seed,omitempty"`
	// Samples is K, the group size.
	Samples     int      `json:"samples"`
	Temperature *float64 `json:"temperature,omitempty"`
	// Seed, when set, is the sampling seed of sample 0; sample k gets
	// Seed+k.
	Seed *int64 `json:"seed,omitempty"`
	// Episode is the sampled runs' episode rule, read over
	// schemas.DefaultOptions (end_on answer: no code run is checked before
	// the policy commits, so printing candidates earns nothing), or over
	// schemas.UpstreamOptions when it says compat upstream.
	Episode     *schemas.EpisodeOptions `json:"episode,omitempty"`
	MaxInFlight int                     `json:"max_in_flight,omitempty"`

	Serving Serving      `json:"serving"`
	Train   TrainCommand `json:"train"`
	GRPO    GRPO         `json:"grpo"`
	Stale   Staleness    `json:"staleness"`

	// Eval, when set, runs a held-out evaluation every Eval.Every
	// iterations with the new adapter; its success rate goes into the
	// iteration's report and the progress table.
	Eval *Eval `json:"eval,omitempty"`

	// Overlap submits iteration i+1's batch, sampled from the current
	// policy, while iteration i trains (needs staleness.max_lag ≥ 1).
	Overlap bool `json:"overlap,omitempty"`

	// WaitTimeout bounds waiting for one batch's scores (default 1h).
	WaitTimeout Duration `json:"wait_timeout,omitempty"`
}

// Serving is the OpenAI-compatible engine that samples the policy: an
// external one (vLLM) at BaseURL, or, when BaseURL is empty and the
// training step is a resident worker, that worker itself (it serves the
// model it trains, at Listen).
type Serving struct {
	// BaseURL ends in /v1; adapters are loaded at BaseURL/load_lora_adapter.
	BaseURL string `json:"base_url,omitempty"`
	// BaseModel names version 0 (the model before any step).
	BaseModel string `json:"base_model"`
	// Listen is where the resident worker serves (host:port) when BaseURL
	// is empty; default 127.0.0.1 on a free port. The llm-workers must
	// reach it.
	Listen string `json:"listen,omitempty"`
	// AdapterPrefix names adapters <prefix>-v<version> (default "medgym").
	AdapterPrefix string `json:"adapter_prefix,omitempty"`
	// AdapterDir, when set, is the directory the engine sees WorkDir's
	// adapters under (a shared volume mounted elsewhere).
	AdapterDir string `json:"adapter_dir,omitempty"`
	APIKeyEnv  string `json:"api_key_env,omitempty"`
	MaxTokens  int    `json:"max_tokens,omitempty"`
	// Logprobs asks for token ids and logprobs (vLLM) for the batch.
	Logprobs bool `json:"logprobs"`
}

// TrainCommand is the training step: a resident worker (Resident, the
// command that starts python/worker.py; it loads the model once and keeps
// the optimiser state across iterations) or one process per iteration
// (Command). Command's arguments may use {batch}, {out}, {init} (empty for
// the first iteration), {metrics} and {version} (the new version).
type TrainCommand struct {
	Resident []string `json:"resident,omitempty"`
	// Recipe overrides the worker's per-mode defaults (GRPO: lr 1e-5,
	// KL 1e-3; resident only: a per-iteration command takes flags).
	Recipe  worker.Recipe `json:"recipe,omitempty"`
	Command []string      `json:"command"`
	Dir     string        `json:"dir,omitempty"`
	Timeout Duration      `json:"timeout,omitempty"`
}

// GRPO are the advantage settings.
type GRPO struct {
	Eps              float64 `json:"eps,omitempty"`
	Scale            string  `json:"scale,omitempty"`
	DropZeroVariance bool    `json:"drop_zero_variance"`
	// FormatWeight weighs the format reward (the share of turns that parsed
	// as an action) added to the verifier's correctness reward (upstream
	// §6.2: correctness + format; the paper gives no weights). Default
	// DefaultFormatWeight; 0 turns it off.
	FormatWeight *float64 `json:"format_weight,omitempty"`
}

// Eval is the held-out evaluation: tasks (default: the training datasets'
// test split) sampled Samples times at Temperature by the adapter an
// iteration has just produced.
type Eval struct {
	Every       int      `json:"every"`
	Datasets    []string `json:"datasets,omitempty"`
	Split       string   `json:"split,omitempty"`
	TaskIDs     []string `json:"task_ids,omitempty"`
	Limit       int      `json:"limit,omitempty"`
	Samples     int      `json:"samples,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
}

// DefaultFormatWeight is the default weight of the format reward.
const DefaultFormatWeight = 0.1

// Staleness bounds how old the samples of a batch may be. A batch holds
// the current iteration's run and the runs of the Replay iterations before
// it; a sample more than MaxLag versions behind the current policy is
// dropped (Mode "drop", the default) or kept with weight Decay^(lag−MaxLag)
// (Mode "reweight").
type Staleness struct {
	Replay int     `json:"replay"`
	MaxLag int     `json:"max_lag"`
	Mode   string  `json:"mode,omitempty"`
	Decay  float64 `json:"decay,omitempty"`
}

// Duration is a time.Duration written as "90s" in config files.
type Duration time.Duration

// UnmarshalJSON reads "90s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var sec float64
		if err := json.Unmarshal(b, &sec); err != nil {
			return fmt.Errorf("duration %s: want \"90s\" or seconds", b)
		}
		*d = Duration(sec * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadConfig reads a JSON or YAML (.yaml, .yml) config file and applies
// defaults.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
		var v any
		if err := yaml.Unmarshal(b, &v); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
		if b, err = json.Marshal(v); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
	}
	// The episode options are read over medgym's defaults (end_on answer:
	// no code run is checked before the policy commits), or over
	// upstream's with episode.compat upstream, as medgym run's spec files.
	decode := func(ep schemas.EpisodeOptions) (Config, error) {
		c := Config{Episode: &ep}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
		return c, nil
	}
	c, err := decode(schemas.DefaultOptions())
	if err == nil && c.Episode != nil && c.Episode.Upstream() {
		c, err = decode(schemas.UpstreamOptions())
	}
	if err != nil {
		return Config{}, err
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.RunPrefix == "" {
		c.RunPrefix = "online"
	}
	if c.Split == "" {
		c.Split = "train"
	}
	if c.Serving.AdapterPrefix == "" {
		c.Serving.AdapterPrefix = "medgym"
	}
	if c.Serving.APIKeyEnv == "" {
		c.Serving.APIKeyEnv = "OPENAI_API_KEY"
	}
	if c.Temperature == nil {
		t := 0.6 // upstream §6.2 rollout temperature
		c.Temperature = &t
	}
	if c.Episode == nil {
		o := schemas.DefaultOptions()
		c.Episode = &o
	}
	if c.GRPO.Scale == "" {
		c.GRPO.Scale = "group"
	}
	if c.Eval != nil {
		e := *c.Eval
		if len(e.Datasets) == 0 {
			e.Datasets = c.Datasets
		}
		if e.Split == "" {
			e.Split = "test"
		}
		if e.Samples == 0 {
			e.Samples = 1
		}
		if e.Temperature == nil {
			t := 0.0
			e.Temperature = &t
		}
		c.Eval = &e
	}
	if c.GRPO.FormatWeight == nil {
		w := DefaultFormatWeight
		c.GRPO.FormatWeight = &w
	}
	if c.Stale.Mode == "" {
		c.Stale.Mode = "drop"
	}
	if c.Stale.Decay == 0 {
		c.Stale.Decay = 0.5
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = Duration(time.Hour)
	}
	if c.Train.Timeout == 0 {
		c.Train.Timeout = Duration(2 * time.Hour)
	}
	if len(c.Train.Command) == 0 {
		c.Train.Command = []string{"/usr/bin/python3", "services/trainer/python/train_step.py", "--mode", "grpo",
			"--data", "{batch}", "--out", "{out}", "--init={init}", "--metrics", "{metrics}"}
	}
	return c
}

// ServesFromWorker reports whether the resident worker serves the policy
// (no external engine at serving.base_url).
func (c Config) ServesFromWorker() bool { return c.Serving.BaseURL == "" && len(c.Train.Resident) > 0 }

// Validate checks the config.
func (c Config) Validate() error {
	var errs []error
	req := func(ok bool, msg string) {
		if !ok {
			errs = append(errs, errors.New(msg))
		}
	}
	req(c.NATS != "", "nats is required")
	req(c.Store != "", "store is required")
	req(c.WorkDir != "", "work_dir is required")
	req(schemas.ValidToken(c.RunPrefix), "run_prefix must be letters, digits, - and _")
	req(c.Iterations > 0, "iterations must be ≥ 1")
	req(len(c.Datasets) > 0, "datasets is required")
	req(c.Samples >= 2, "samples (K) must be ≥ 2 for group advantages")
	req(c.Serving.BaseModel != "", "serving.base_model is required")
	req(c.Serving.BaseURL != "" || len(c.Train.Resident) > 0,
		"serving.base_url is required unless train.resident is set (the resident worker then serves the policy)")
	req(c.Serving.Listen == "" || c.Serving.BaseURL == "", "serving.listen is for the resident worker's server: drop it or serving.base_url")
	req(schemas.ValidToken(c.Serving.AdapterPrefix), "serving.adapter_prefix must be a valid token")
	req(c.Stale.Replay >= 0 && c.Stale.MaxLag >= 0, "staleness.replay and staleness.max_lag must be ≥ 0")
	req(c.Stale.Mode == "drop" || c.Stale.Mode == "reweight", "staleness.mode must be drop or reweight")
	req(c.GRPO.Scale == "group" || c.GRPO.Scale == "none", "grpo.scale must be group or none")
	req(c.Eval == nil || c.Eval.Every >= 1, "eval.every must be ≥ 1")
	req(!c.Overlap || c.Stale.MaxLag >= 1, "overlap samples one version behind: it needs staleness.max_lag ≥ 1")
	if c.Episode != nil {
		if err := c.Episode.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
