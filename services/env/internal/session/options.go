package session

import (
	"fmt"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Options are a session's episode rules and labels (the API's options);
// nil fields take medgym's defaults (schemas.DefaultOptions).
type Options struct {
	MaxTurns          *int              `json:"max_turns,omitempty"`
	EndOn             *string           `json:"end_on,omitempty"`
	VerifierMode      *string           `json:"verifier_mode,omitempty"`
	ShowVerdict       *bool             `json:"show_verdict,omitempty"`
	LoopGuard         *string           `json:"loop_guard,omitempty"`
	ActionTimeoutSec  *int              `json:"action_timeout_sec,omitempty"`
	EpisodeTimeoutSec *int              `json:"episode_timeout_sec,omitempty"`
	Compat            *string           `json:"compat,omitempty"`
	PromptMode        *string           `json:"prompt_mode,omitempty"`
	Seed              *int64            `json:"seed,omitempty"`
	Temperature       *float64          `json:"temperature,omitempty"`
	Model             string            `json:"model,omitempty"`
	RunID             string            `json:"run_id,omitempty"`
	Tags              map[string]string `json:"tags,omitempty"`
	Reward            string            `json:"reward,omitempty"`
	LabelSets         []string          `json:"label_sets,omitempty"`
}

// resolve returns the episode options, the recorded policy and the run;
// defaultEndOn ("" for medgym's) is the end_on of a session that names none.
func (o Options) resolve(defaultRun, defaultModel, defaultEndOn string) (schemas.EpisodeOptions, schemas.PolicySpec, string, error) {
	opts := schemas.DefaultOptions()
	if defaultEndOn != "" {
		opts.EndOn = defaultEndOn
	}
	if o.Compat != nil && *o.Compat == schemas.CompatUpstream {
		opts = schemas.UpstreamOptions()
	}
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	set(&opts.MaxTurns, o.MaxTurns)
	set(&opts.ActionTimeoutSec, o.ActionTimeoutSec)
	set(&opts.EpisodeTimeoutSec, o.EpisodeTimeoutSec)
	for _, f := range []struct {
		dst *string
		v   *string
	}{{&opts.EndOn, o.EndOn}, {&opts.VerifierMode, o.VerifierMode}, {&opts.LoopGuard, o.LoopGuard}, {&opts.Compat, o.Compat}, {&opts.PromptMode, o.PromptMode}} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	if o.ShowVerdict != nil {
		opts.ShowVerdict = *o.ShowVerdict
	}
	opts.LabelSets = o.LabelSets
	if err := opts.Validate(); err != nil {
		return opts, schemas.PolicySpec{}, "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := tasks.CheckLabelSets(opts.LabelSets); err != nil {
		return opts, schemas.PolicySpec{}, "", fmt.Errorf("%w: options: %w", ErrInvalid, err)
	}
	switch o.Reward {
	case "", "verifier":
	default:
		return opts, schemas.PolicySpec{}, "", fmt.Errorf("%w: options: reward %q (the only source offered is \"verifier\": the verifier's score)", ErrInvalid, o.Reward)
	}
	model := o.Model
	if model == "" {
		model = defaultModel
	}
	if len(model) > 256 {
		return opts, schemas.PolicySpec{}, "", fmt.Errorf("%w: options: model is longer than 256 bytes", ErrInvalid)
	}
	pol := schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: model, Temperature: o.Temperature, Seed: o.Seed}
	if err := pol.Validate(); err != nil {
		return opts, pol, "", fmt.Errorf("%w: options: %w", ErrInvalid, err)
	}
	run := o.RunID
	if run == "" {
		run = defaultRun
	}
	if !schemas.ValidToken(run) || len(run) > 200 {
		return opts, pol, "", fmt.Errorf("%w: options: run_id %q: letters, digits, - and _ only, at most 200", ErrInvalid, run)
	}
	if len(o.Tags) > 32 {
		return opts, pol, "", fmt.Errorf("%w: options: %d tags, at most 32", ErrInvalid, len(o.Tags))
	}
	for k, v := range o.Tags {
		if len(k) > 256 || len(v) > 1024 {
			return opts, pol, "", fmt.Errorf("%w: options: tag %.40q: keys at most 256 bytes, values at most 1024", ErrInvalid, k)
		}
	}
	return opts, pol, run, nil
}
