package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/cmd/medgym/internal/export"
	"github.com/medgym/medgym/cmd/medgym/internal/harbor"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// cmdExport writes the task datasets external RL frameworks train from
// (internal/export): verl's RL parquet and the prompt-only dataset of TRL and
// SkyRL, one file each per dataset and split; with --format harbor, Harbor
// task folders (internal/harbor), one per task.
func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", tasks.DataRoot(), "shared data root")
	library := fs.String("library", tasks.LibraryDir(), "generated task library")
	datasets := fs.String("dataset", "medcalcbench", "dataset(s), comma separated")
	splits := fs.String("split", "test", "split(s), comma separated")
	limit := fs.Int("limit", 0, "at most this many tasks per dataset and split (0 = all)")
	out := fs.String("out", "", "output directory (required): verl/ and prompts/ are written under it (--format harbor: one folder per task)")
	format := fs.String("format", "rl", "rl (verl parquet and TRL/SkyRL prompts) or harbor (Harbor task folders)")
	ids := fs.String("task", "", "only these task ids, comma separated (a trailing * matches a prefix)")
	image := fs.String("image", "medgym/sandbox:latest", "--format harbor: the agent environment's base image (scripts/sandbox-image.sh)")
	verifierImage := fs.String("verifier-image", "medgym/harbor-verifier:latest", "--format harbor: the verifier environment's base image (scripts/harbor-images.sh)")
	network := fs.String("harbor-network", harbor.NetworkPolicy, "--format harbor: how the containers are kept off the network: no-network (task.toml's network_mode; Harbor's Docker environment enforces it with a sidecar it pulls from Docker Hub) or compose (a docker-compose.yaml with network_mode: none, for a local engine without registry access)")
	agentTimeout := fs.Int("agent-timeout", 1800, "--format harbor: the agent's timeout in seconds (task.toml [agent] timeout_sec)")
	endOn := fs.String("end-on", schemas.DefaultOptions().EndOn, "the sessions' end_on (it decides whether the prompt offers the answer action): accepted, answer or both")
	upstream := fs.Bool("upstream-compat", false, "the sessions' compat: upstream (upstream's prompt layout)")
	promptMode := fs.String("prompt-mode", schemas.PromptModeJSON, "the sessions' prompt_mode: json (the reply is a JSON object) or tools (the model calls the session's tools; TRL's environment)")
	systemAsUser := fs.Bool("system-as-user", false, "fold the system prompt into the first user message (as the environment server's --system-as-user)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("export: --out is required")
	}
	if *format != "rl" && *format != "harbor" {
		return fmt.Errorf("export: --format %q: rl or harbor", *format)
	}
	var spec schemas.RunSpec
	if *ids != "" {
		spec.TaskIDs = splitList(*ids)
	}
	opts := schemas.DefaultOptions()
	opts.EndOn = *endOn
	if *upstream {
		opts = schemas.UpstreamOptions()
	}
	opts.PromptMode = *promptMode
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	popt := agent.EpisodePromptOptions(opts, *systemAsUser)
	for _, ds := range splitList(*datasets) {
		for _, sp := range splitList(*splits) {
			ts, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: sp, DataRoot: *data, LibraryDir: *library})
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			ts = tasks.Select(spec, ts)
			if *limit > 0 && len(ts) > *limit {
				ts = ts[:*limit]
			}
			if *format == "harbor" {
				opt := harbor.Options{Image: *image, VerifierImage: *verifierImage, AgentTree: tasks.AgentTree(*library), AgentTimeoutSec: *agentTimeout, Network: *network}
				written, skipped := 0, 0
				for _, t := range ts {
					err := harbor.Write(filepath.Join(*out, t.View.ID), t, opt)
					switch {
					case errors.Is(err, harbor.ErrHarness):
						skipped++
						continue
					case err != nil:
						return fmt.Errorf("export: %w", err)
					}
					written++
				}
				fmt.Fprintf(stdout, "%s/%s: %d Harbor tasks -> %s\n", ds, sp, written, *out)
				if skipped > 0 {
					fmt.Fprintf(stderr, "export: %s/%s: %d tasks skipped: %v\n", ds, sp, skipped, harbor.ErrHarness)
				}
				continue
			}
			views := make([]schemas.TaskView, len(ts))
			for i := range ts {
				views[i] = ts[i].View
			}
			verl, prompts, err := export.Records(views, popt)
			if err != nil {
				return err
			}
			name := ds + "_" + sp + ".parquet"
			if err := export.Write(filepath.Join(*out, "verl", name), export.VerlSchema, verl, false); err != nil {
				return err
			}
			if err := export.Write(filepath.Join(*out, "prompts", name), export.PromptSchema, prompts, true); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s/%s: %d tasks -> %s, %s\n", ds, sp, len(views),
				filepath.Join(*out, "verl", name), filepath.Join(*out, "prompts", strings.TrimSuffix(name, ".parquet")+".{parquet,jsonl}"))
		}
	}
	return nil
}

// cmdHarborVerify scores the answer a Harbor trial left in --work against
// the task file (a Harbor task's tests/task.json) with the verifier's rules
// and writes Harbor's reward.json ({"reward": R}) and medgym.json (outcome,
// reward, verdict, rules' version) to --out. It runs in the verifier's
// container of an exported Harbor task (tests/test.sh).
func cmdHarborVerify(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("harbor-verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	taskFile := fs.String("task", "/tests/task.json", "the task file (view and ground truth)")
	work := fs.String("work", harbor.WorkDir, "the agent's working directory, as the trial left it")
	out := fs.String("out", "/logs/verifier", "where reward.json and medgym.json go")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*taskFile)
	if err != nil {
		return fmt.Errorf("harbor-verify: %w", err)
	}
	var t harbor.TaskFile
	if err := json.Unmarshal(b, &t); err != nil {
		return fmt.Errorf("harbor-verify: %s: %w", *taskFile, err)
	}
	res, err := harbor.Score(t, *work)
	if err != nil {
		return fmt.Errorf("harbor-verify: %w", err)
	}
	detail, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("harbor-verify: %w", err)
	}
	reward, err := json.Marshal(map[string]float64{"reward": res.Reward})
	if err != nil {
		return fmt.Errorf("harbor-verify: %w", err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("harbor-verify: %w", err)
	}
	if err := os.WriteFile(filepath.Join(*out, "medgym.json"), append(detail, '\n'), 0o644); err != nil {
		return fmt.Errorf("harbor-verify: %w", err)
	}
	if err := os.WriteFile(filepath.Join(*out, "reward.json"), append(reward, '\n'), 0o644); err != nil {
		return fmt.Errorf("harbor-verify: %w", err)
	}
	fmt.Fprintf(stdout, "%s: %s, reward %g\n", res.TaskID, res.Outcome, res.Reward)
	return nil
}
