// Command trainer turns stored trajectories into training data and drives
// online RL.
//
//	trainer build  --store DIR|s3://... --out DIR [--run ID ...] [filters]
//	trainer train  --mode sft|dpo|grpo --data FILE --out DIR [--backend hf --model M]
//	trainer score  --store URL --run ID --adapter DIR --out SCORES.jsonl [--backend hf --model M]
//	trainer online --config FILE
//
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/trainer/online"
	"github.com/medgym/medgym/services/trainer/train"
	"github.com/medgym/medgym/store"
)

func main() { bus.CommandMain("trainer", run) }

const usage = "usage: trainer build --store URL --out DIR [flags] | trainer train --mode M --data FILE --out DIR [flags] | trainer score --store URL --run ID --adapter DIR --out FILE | trainer online --config FILE"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return cmdBuild(ctx, args[1:], stdout, stderr)
	case "online":
		return cmdOnline(ctx, args[1:], stdout, stderr)
	case "train":
		return cmdTrain(ctx, args[1:], stdout, stderr)
	case "score":
		return cmdScore(ctx, args[1:], stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q; %s", args[0], usage)
	}
}

// listFlag collects a repeatable, comma-separable flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func cmdBuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f train.Filter
	var o train.Options
	storeURL := fs.String("store", "", "trajectory store: a directory or s3://bucket/prefix (S3 credentials from AWS_*)")
	out := fs.String("out", "", "output directory")
	fs.Var((*listFlag)(&f.Runs), "run", "run id (repeatable; default: every run in the store)")
	fs.Var((*listFlag)(&f.Datasets), "dataset", "only these datasets (repeatable)")
	fs.StringVar(&f.Split, "split", "", "only this split")
	fs.Var((*listFlag)(&f.Models), "model", "only these models (repeatable)")
	fs.Var((*listFlag)(&f.VerifierVersions), "verifier-version", "only these verifier versions (repeatable)")
	fs.BoolVar(&f.IncludeInfra, "include-infra", false, "keep infra_failure and sandbox_error episodes (excluded by default)")
	fs.StringVar(&o.ObsRole, "obs-role", train.ObsSampled, "role of observation turns: sampled (as the model saw them), tool or user")
	fs.StringVar(&o.SFTFormatErrors, "sft-format-errors", train.FormatMask, "SFT turns that failed to parse: mask (no loss), drop (the episode) or keep")
	fs.IntVar(&o.MaxCrossPairs, "max-cross-pairs", 4, "cross-episode DPO pairs per task")
	fs.BoolVar(&o.NoCrossPairs, "no-cross-pairs", false, "only upstream's within-episode DPO pairs")
	fs.Int64Var(&o.Seed, "seed", 1, "seed of the verifier-data balancing")
	fs.Float64Var(&o.GRPO.Eps, "grpo-eps", 1e-6, "ε added to the group std (verl 1e-6, TRL 1e-4)")
	fs.StringVar(&o.GRPO.Scale, "grpo-scale", "group", "advantage scaling: group ((r−mean)/(std+ε)) or none (Dr. GRPO)")
	fs.BoolVar(&o.GRPO.DropZeroVariance, "grpo-drop-zero-variance", false, "drop groups whose rewards are all equal")
	fs.Float64Var(&o.GRPO.FormatWeight, "grpo-format-weight", 0, "add this × the share of turns that parsed to the reward (the online loop's format reward; 0: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *storeURL == "" || *out == "" {
		return errors.New("build: --store and --out are required")
	}
	if o.ObsRole != train.ObsSampled && o.ObsRole != "tool" && o.ObsRole != "user" {
		return fmt.Errorf("build: --obs-role %q (want sampled, tool or user)", o.ObsRole)
	}
	if o.SFTFormatErrors != train.FormatMask && o.SFTFormatErrors != train.FormatDrop && o.SFTFormatErrors != train.FormatKeep {
		return fmt.Errorf("build: --sft-format-errors %q (want mask, drop or keep)", o.SFTFormatErrors)
	}
	st, err := store.Open(ctx, *storeURL, store.Options{})
	if err != nil {
		return err
	}
	res, err := train.Build(ctx, st, st.String(), f, o, *out)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, res.DataCard)
	fmt.Fprintf(stdout, "\nwritten to %s\n", *out)
	return nil
}

func cmdOnline(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("online", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (JSON or YAML)")
	level := fs.String("log", "info", "log level: debug, info, warn, error")
	var tlsFiles bus.TLS
	tlsFiles.RegisterFlags(fs, os.Getenv)
	var wait time.Duration
	var waitErr error
	bus.RegisterConnectTimeout(fs, os.Getenv, &wait, &waitErr)
	natsURL := fs.String("nats", os.Getenv("MEDGYM_NATS"), "NATS server URL, or comma-separated seed URLs of a cluster; overrides the config's nats (env MEDGYM_NATS)")
	var streams bus.StreamOptions
	streams.RegisterFlags(fs, os.Getenv)
	var provision bus.ProvisionMode
	var provisionErr error
	bus.RegisterProvisionFlag(fs, os.Getenv, &provision, &provisionErr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := errors.Join(waitErr, provisionErr); err != nil {
		return fmt.Errorf("online: %w", err)
	}
	if err := streams.Validate(); err != nil {
		return fmt.Errorf("online: %w", err)
	}
	if *cfgPath == "" {
		return errors.New("online: --config is required")
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("online: --log: %w", err)
	}
	cfg, err := online.LoadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *natsURL != "" {
		cfg.NATS = *natsURL
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	_, err = online.Run(ctx, cfg, streams, stdout, log, bus.WithTLS(tlsFiles), bus.WithConnectTimeout(wait), bus.WithProvision(provision))
	return err
}
