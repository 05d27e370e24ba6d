package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/cmd/medgym/internal/export"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// cmdExport writes the task datasets external RL frameworks train from
// (internal/export): verl's RL parquet and the prompt-only dataset of TRL and
// SkyRL, one file each per dataset and split.
func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", tasks.DataRoot(), "shared data root")
	library := fs.String("library", tasks.LibraryDir(), "generated task library")
	datasets := fs.String("dataset", "medcalcbench", "dataset(s), comma separated")
	splits := fs.String("split", "test", "split(s), comma separated")
	limit := fs.Int("limit", 0, "at most this many tasks per dataset and split (0 = all)")
	out := fs.String("out", "", "output directory (required): verl/ and prompts/ are written under it")
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
			if *limit > 0 && len(ts) > *limit {
				ts = ts[:*limit]
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
