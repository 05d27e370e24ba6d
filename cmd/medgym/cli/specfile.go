package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/medgym/medgym/schemas"
)

// loadSpecFile reads a run spec from YAML or JSON. Its keys are those of
// schemas.RunSpec (run_id, datasets, split, limit, samples, temperatures,
// policy{...}, options{...}, max_in_flight, ...); unknown keys are errors.
func loadSpecFile(path string) (schemas.RunSpec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return schemas.RunSpec{}, fmt.Errorf("run spec: %w", err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return schemas.RunSpec{}, fmt.Errorf("run spec %s: %w", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return schemas.RunSpec{}, fmt.Errorf("run spec %s: %w", path, err)
	}
	decode := func(opts schemas.EpisodeOptions) (schemas.RunSpec, error) {
		spec := schemas.RunSpec{Samples: 1, Split: "test", Options: opts}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return schemas.RunSpec{}, fmt.Errorf("run spec %s: %w", path, err)
		}
		return spec, nil
	}
	spec, err := decode(schemas.DefaultOptions())
	if err == nil && spec.Options.Upstream() {
		// options.compat upstream: the options it leaves out are upstream's,
		// and one it gives must agree with them (Validate).
		spec, err = decode(schemas.UpstreamOptions())
	}
	return spec, err
}

// overlay copies into file the fields whose flags were set explicitly.
func overlay(fs *flag.FlagSet, file, flags schemas.RunSpec) schemas.RunSpec {
	set := map[string]func(){
		"run-id":          func() { file.RunID = flags.RunID },
		"dataset":         func() { file.Datasets = flags.Datasets },
		"split":           func() { file.Split = flags.Split },
		"tasks-dir":       func() { file.TasksDir = flags.TasksDir },
		"limit":           func() { file.Limit = flags.Limit },
		"sample-seed":     func() { file.SampleSeed = flags.SampleSeed },
		"category":        func() { file.Categories = flags.Categories },
		"task":            func() { file.TaskIDs = flags.TaskIDs },
		"samples":         func() { file.Samples = flags.Samples },
		"temperatures":    func() { file.Temperatures = flags.Temperatures },
		"policy":          func() { file.Policy.Name = flags.Policy.Name },
		"llm-url":         func() { file.Policy.BaseURL = flags.Policy.BaseURL },
		"model":           func() { file.Policy.Model = flags.Policy.Model },
		"seed":            func() { file.Policy.Seed = flags.Policy.Seed },
		"api-key-env":     func() { file.Policy.APIKeyEnv = flags.Policy.APIKeyEnv },
		"max-tokens":      func() { file.Policy.MaxTokens = flags.Policy.MaxTokens },
		"logprobs":        func() { file.Policy.Logprobs = flags.Policy.Logprobs },
		"max-turns":       func() { file.Options.MaxTurns = flags.Options.MaxTurns },
		"end-on":          func() { file.Options.EndOn = flags.Options.EndOn },
		"show-verdict":    func() { file.Options.ShowVerdict = flags.Options.ShowVerdict },
		"loop-guard":      func() { file.Options.LoopGuard = flags.Options.LoopGuard },
		"verifier-mode":   func() { file.Options.VerifierMode = flags.Options.VerifierMode },
		"labels":          func() { file.Options.LabelSets = flags.Options.LabelSets },
		"action-timeout":  func() { file.Options.ActionTimeoutSec = flags.Options.ActionTimeoutSec },
		"episode-timeout": func() { file.Options.EpisodeTimeoutSec = flags.Options.EpisodeTimeoutSec },
		"upstream-compat": func() { file.Options = flags.Options },
		"max-in-flight":   func() { file.MaxInFlight = flags.MaxInFlight },
	}
	fs.Visit(func(fl *flag.Flag) {
		if f, ok := set[fl.Name]; ok {
			f()
		}
	})
	if file.RunID == "" {
		file.RunID = flags.RunID // generated
	}
	if file.Policy.Name == schemas.PolicyReference {
		file.Policy.Model = "reference-solution"
	}
	file.SubmittedAt = time.Now().UTC()
	return file
}
