package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

func cmdTasks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: medgym tasks stats|show|list|verify|generate|stage-upstream [flags]")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "verify":
		return cmdTasksVerify(ctx, args, stdout, stderr)
	case "generate":
		return cmdTasksGenerate(ctx, args, stdout, stderr)
	case "stage-upstream":
		return cmdTasksStageUpstream(args, stdout, stderr)
	}
	fs := flag.NewFlagSet("tasks "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultDataRoot(), "shared data root")
	tasksDir := fs.String("tasks-dir", "", "upstream MedAgentGym task folder")
	library := fs.String("library", defaultLibraryDir(), "generated task library")
	datasets := fs.String("dataset", strings.Join(tasks.Datasets(), ","), "dataset(s)")
	splits := fs.String("split", "train,test", "split(s)")
	format := fs.String("format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	load := func() ([]tasks.Task, error) {
		var all []tasks.Task
		for _, ds := range splitList(*datasets) {
			for _, sp := range splitList(*splits) {
				ts, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: sp, DataRoot: *data, TasksDir: *tasksDir, LibraryDir: *library})
				if err != nil {
					return nil, err
				}
				all = append(all, ts...)
			}
		}
		return all, nil
	}
	switch sub {
	case "stats":
		all, err := load()
		if err != nil {
			return err
		}
		sum := tasks.Summarize(all)
		// Decontamination: 10-gram overlap of each dataset's test questions with its train questions.
		bySplit := map[string]map[string][]tasks.Task{}
		for _, t := range all {
			if bySplit[t.View.Dataset] == nil {
				bySplit[t.View.Dataset] = map[string][]tasks.Task{}
			}
			bySplit[t.View.Dataset][t.View.Split] = append(bySplit[t.View.Dataset][t.View.Split], t)
		}
		overlap := map[string]tasks.Overlap{}
		for ds, sp := range bySplit {
			if len(sp["train"]) > 0 && len(sp["test"]) > 0 {
				overlap[ds] = tasks.NGramOverlap(sp["train"], sp["test"], 10)
			}
		}
		if *format == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				tasks.Summary
				Total   int                      `json:"total"`
				Overlap map[string]tasks.Overlap `json:"train_test_10gram_overlap"`
			}{sum, len(all), overlap})
		}
		defer func() {
			for ds, o := range overlap {
				fmt.Fprintf(stdout, "%-14s train/test: %d test questions verbatim in train, %.1f%% share a 10-gram (templated wording)\n", ds, o.ExactShared, 100*o.Fraction)
			}
		}()
		total := 0
		for _, g := range sum.Groups {
			fmt.Fprintf(stdout, "%-14s %-6s %6d tasks  %4d categories  answer types %v\n", g.Dataset, g.Split, g.Count, len(g.Categories), g.AnswerTypes)
			total += g.Count
		}
		fmt.Fprintf(stdout, "total %d tasks\n", total)
		return nil
	case "list":
		all, err := load()
		if err != nil {
			return err
		}
		for _, t := range all {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", t.View.ID, t.View.Split, t.View.Category, oneLine(t.View.Question, 80))
		}
		return nil
	case "show":
		if fs.NArg() != 1 {
			return fmt.Errorf("usage: medgym tasks show [--dataset D] ID")
		}
		id := fs.Arg(0)
		all, err := load()
		if err != nil {
			return err
		}
		for _, t := range all {
			if t.View.ID == id {
				return showTask(stdout, t.View)
			}
		}
		return fmt.Errorf("task %q not found in %s (%s)", id, *datasets, *splits)
	}
	return fmt.Errorf("unknown tasks command %q", sub)
}

// showTask prints a task as the agent sees it: never the ground truth.
func showTask(w io.Writer, v schemas.TaskView) error {
	fmt.Fprintf(w, "id: %s\ndataset: %s\nsplit: %s\ncategory: %s\nanswer type: %s\npermitted actions: %s\n",
		v.ID, v.Dataset, v.Split, v.Category, v.AnswerType, strings.Join(v.PermittedActions, ", "))
	if len(v.Resources) > 0 {
		fmt.Fprintf(w, "data: %s\n", strings.Join(v.Resources, ", "))
	}
	fmt.Fprintf(w, "\n--- instruction ---\n%s\n\n--- question ---\n%s\n", v.Instruction, v.Question)
	if v.Context != "" {
		fmt.Fprintf(w, "\n--- context ---\n%s\n", v.Context)
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// cmdTasksVerify runs reference solutions through the real pipeline
// (sandbox and verifier) and prints pass/fail counts.
func cmdTasksVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	f.policy = schemas.PolicyReference
	f.endOn = schemas.EndOnBoth
	spec, err := f.spec()
	if err != nil {
		return err
	}
	res, err := runSpec(ctx, spec, &f, stderr)
	if err != nil {
		return err
	}
	pass := res.Outcomes[schemas.OutcomeCorrect]
	fmt.Fprintf(stdout, "tasks verify %s: %d passed, %d failed (run %s)\n", strings.Join(spec.Datasets, ","), pass, res.Total-pass, res.RunID)
	if pass != res.Total {
		return fmt.Errorf("%d reference solutions failed; inspect with: medgym query --store %s \"SELECT task_id, outcome, error FROM trajectories WHERE run_id='%s' AND outcome<>'correct'\"", res.Total-pass, f.store, res.RunID)
	}
	return nil
}

// cmdTasksGenerate builds the generated task sets (databases, task files)
// from the shared data: deterministic, same seed → identical files.
func cmdTasksGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultDataRoot(), "shared data root")
	library := fs.String("library", defaultLibraryDir(), "output directory")
	datasets := fs.String("dataset", "", "datasets to generate (default: all generated ones)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := tasks.Generate(ctx, *data, *library, splitList(*datasets)); err != nil {
		return err
	}
	h, err := tasks.LibraryHashes(*library)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "task library written to %s\n  agent tree    %s  %s (the sandbox-worker's --agent-tree)\n  verifier tree %s  %s\n",
		*library, tasks.AgentTree(*library), h.Agent, tasks.VerifierTree(*library), h.Verifier)
	return nil
}

// cmdTasksStageUpstream writes the agent view of an upstream task folder:
// its data without the task files, for a sandbox-worker's --agent-tree.
func cmdTasksStageUpstream(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks stage-upstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tasksDir := fs.String("tasks-dir", "", "upstream MedAgentGym task folder")
	out := fs.String("out", "", "directory to write the agent view to (replaced; outside the task folder)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tasksDir == "" || *out == "" {
		return fmt.Errorf("usage: medgym tasks stage-upstream --tasks-dir DIR --out DIR")
	}
	h, err := tasks.StageUpstream(*tasksDir, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "agent view of %s written to %s\n  agent tree    %s\n  verifier tree %s (the task files, left in %s)\n", *tasksDir, *out, h.Agent, h.Verifier, *tasksDir)
	return nil
}
