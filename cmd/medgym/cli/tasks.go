package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
	"github.com/medgym/medgym/tasks"
	"github.com/medgym/medgym/tasks/generate"
	"github.com/medgym/medgym/tasks/generate/mimicfhir"
	"github.com/medgym/medgym/tasks/meds"
)

func cmdTasks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: medgym tasks stats|show|list|labels|verify|generate|fhir|reference-outputs|stage-upstream [flags]")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "verify":
		return cmdTasksVerify(ctx, args, stdout, stderr)
	case "generate":
		return cmdTasksGenerate(ctx, args, stdout, stderr)
	case "fhir":
		return cmdTasksFHIR(ctx, args, stdout, stderr)
	case "stage-upstream":
		return cmdTasksStageUpstream(args, stdout, stderr)
	case "reference-outputs":
		return cmdTasksReferenceOutputs(ctx, args, stdout, stderr)
	case "labels":
		return cmdTasksLabels(args, stdout, stderr)
	}
	fs := flag.NewFlagSet("tasks "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", tasks.DataRoot(), "shared data root")
	tasksDir := fs.String("tasks-dir", "", "upstream MedAgentGym task folder")
	library := fs.String("library", tasks.LibraryDir(), "generated task library")
	datasets := fs.String("dataset", strings.Join(tasks.Datasets(), ","), "dataset(s)")
	splits := fs.String("split", "train,test", "split(s)")
	format := fs.String("format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("tasks %s: --format %q: want text or json", sub, *format)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	plan, err := tasksPlan(*tasksDir, splitList(*datasets), splitList(*splits), set["dataset"], set["split"], stderr)
	if err != nil {
		return err
	}
	load := func() ([]tasks.Task, error) {
		var all []tasks.Task
		for _, p := range plan {
			for _, sp := range p.splits {
				ts, err := tasks.Load(ctx, tasks.Source{Dataset: p.dataset, Split: sp, DataRoot: *data, TasksDir: *tasksDir, LibraryDir: *library})
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
			return writeJSON(stdout, struct {
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
			fmt.Fprintf(stdout, "%-14s %-6s %6d tasks  %4d categories  answer types %v", g.Dataset, g.Split, g.Count, len(g.Categories), g.AnswerTypes)
			if g.Unanswerable > 0 {
				fmt.Fprintf(stdout, "  %d unanswerable (abstention is correct)", g.Unanswerable)
			}
			fmt.Fprintln(stdout)
			total += g.Count
		}
		fmt.Fprintf(stdout, "total %d tasks\n", total)
		return nil
	case "list":
		all, err := load()
		if err != nil {
			return err
		}
		if *format == "json" {
			rows := make([]taskListRow, len(all))
			for i, t := range all {
				rows[i] = taskListRow{ID: t.View.ID, Dataset: t.View.Dataset, Split: t.View.Split,
					Category: t.View.Category, AnswerType: string(t.View.AnswerType), Question: t.View.Question,
					Upstream: upstreamIdentity(t)}
			}
			return writeJSON(stdout, rows)
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
			if tasks.MatchID(t.View.ID, id) {
				if *format == "json" {
					return writeJSON(stdout, struct {
						schemas.TaskView
						Upstream string `json:"upstream,omitempty"`
					}{t.View, upstreamIdentity(t)})
				}
				if err := showTask(stdout, t.View); err != nil {
					return err
				}
				if u := upstreamIdentity(t); u != "" {
					fmt.Fprintf(stdout, "\n--- upstream ---\n%s\n", u)
				}
				return nil
			}
		}
		return fmt.Errorf("task %q not found in %s (%s)", id, *datasets, *splits)
	}
	return fmt.Errorf("unknown tasks command %q", sub)
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// taskListRow is one task of `tasks list --format json`: what the agent
// sees of it, without instruction and context, and never the ground truth.
type taskListRow struct {
	ID         string `json:"id"`
	Dataset    string `json:"dataset"`
	Split      string `json:"split"`
	Category   string `json:"category"`
	AnswerType string `json:"answer_type"`
	Question   string `json:"question"`
	Upstream   string `json:"upstream,omitempty"`
}

// upstreamIdentity says where an upstream task comes from: file, line,
// upstream's index and the row's own id field; "" for a built-in task.
func upstreamIdentity(t tasks.Task) string {
	x := t.Truth.Extra
	if x["upstream_file"] == "" {
		return ""
	}
	s := fmt.Sprintf("%s line %s, index %s", x["upstream_file"], x["upstream_line"], x["upstream_index"])
	if x["upstream_id"] != "" {
		s += ", " + x["upstream_id"]
	}
	return s
}

// datasetSplits is one dataset and the splits to load of it.
type datasetSplits struct {
	dataset string
	splits  []string
}

// tasksPlan decides what the tasks commands load. Built-in: every dataset
// with every split asked. With an upstream folder (tasksDir), the datasets
// default to the folders present, and splits not given explicitly default
// to the split files present, the missing ones named on warn; a split asked
// explicitly must exist (Load says which file is missing).
func tasksPlan(tasksDir string, datasets, splits []string, datasetSet, splitSet bool, warn io.Writer) ([]datasetSplits, error) {
	if tasksDir == "" {
		out := make([]datasetSplits, len(datasets))
		for i, ds := range datasets {
			out[i] = datasetSplits{ds, splits}
		}
		return out, nil
	}
	if !datasetSet {
		present, err := tasks.UpstreamPresent(tasksDir)
		if err != nil {
			return nil, err
		}
		if len(present) == 0 {
			return nil, fmt.Errorf("--tasks-dir %s: no upstream dataset folder in it (upstream datasets: %s)",
				tasksDir, strings.Join(tasks.UpstreamDatasets(), ", "))
		}
		datasets = present
	}
	var out []datasetSplits
	for _, ds := range datasets {
		if splitSet {
			out = append(out, datasetSplits{ds, splits})
			continue
		}
		present, missing, err := tasks.UpstreamSplits(tasksDir, ds, splits)
		if err != nil {
			return nil, err
		}
		for _, sp := range missing {
			rel, _ := tasks.UpstreamFile(ds, sp)
			fmt.Fprintf(warn, "medgym: upstream %s: no %s split (%s is missing); loading %s\n", ds, sp,
				filepath.Join(tasksDir, rel), strings.Join(present, ", "))
		}
		if len(present) == 0 {
			return nil, fmt.Errorf("--tasks-dir %s: dataset %s has none of the split files %s", tasksDir, ds, strings.Join(splits, ", "))
		}
		out = append(out, datasetSplits{ds, present})
	}
	return out, nil
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
	var f RunFlags
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	f.Policy = schemas.PolicyReference
	f.EndOn = schemas.EndOnBoth
	spec, err := f.Spec()
	if err != nil {
		return err
	}
	res, err := RunSpec(ctx, spec, &f, stderr)
	if err != nil {
		return err
	}
	pass := Solved(res.Outcomes)
	fmt.Fprintf(stdout, "tasks verify %s: %d passed, %d failed (run %s)\n", strings.Join(spec.Datasets, ","), pass, res.Total-pass, res.RunID)
	if pass != res.Total {
		return fmt.Errorf("%d reference solutions failed; inspect with: medgym query --store %s \"SELECT task_id, outcome, error FROM trajectories WHERE run_id='%s' AND outcome NOT IN ('correct','abstained_correctly')\"", res.Total-pass, f.Store, res.RunID)
	}
	return nil
}

// cmdTasksGenerate builds the generated task sets (databases, task files)
// from the shared data: deterministic, same seed → identical files.
func cmdTasksGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", tasks.DataRoot(), "shared data root")
	library := fs.String("library", tasks.LibraryDir(), "output directory")
	datasets := fs.String("dataset", "", "datasets to generate (default: all generated ones)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	generate.SetMEDSReader(meds.Read)
	if err := generate.Generate(ctx, *data, *library, splitList(*datasets)); err != nil {
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

// cmdTasksFHIR converts the MIMIC-IV demo to FHIR R4 NDJSON (one file per
// resource type, LICENSE.md, MANIFEST.json): what the FHIR server of the
// FHIR scenario loads (deploy/fhir-server).
func cmdTasksFHIR(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks fhir", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", tasks.DataRoot(), "shared data root")
	out := fs.String("out", filepath.Join(tasks.RepoRoot(), "build", "fhir", "mimic-iv-demo"), "output directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	src := mimicfhir.Source{Demo: filepath.Join(*data, "mimic-iv-demo"),
		MEDS: filepath.Join(*data, "mimic-iv-demo", "fallback_meds", "mimic_iv_demo_meds_events.parquet"), Reader: meds.Read}
	st, err := mimicfhir.Write(ctx, src, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "FHIR R4 NDJSON written to %s (%s)\n", *out, st.Hash)
	for _, t := range mimicfhir.ResourceTypes {
		fmt.Fprintf(stdout, "  %-18s %7d\n", t, st.Counts[t])
	}
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

// cmdTasksReferenceOutputs runs the reference solution of every BioCoder
// task of an upstream folder the way an agent's function runs (spliced into
// the task's context, in the sandbox) and writes the outputs to
// tasks.BioCoderOutputsFile, where the loader finds them for strict grading.
func cmdTasksReferenceOutputs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks reference-outputs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tasksDir := fs.String("tasks-dir", "", "upstream MedAgentGym task folder (required)")
	backend := fs.String("backend", "bwrap", "sandbox backend: bwrap or docker")
	timeout := fs.Int("timeout", 120, "seconds per reference run (upstream: 120)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tasksDir == "" {
		return fmt.Errorf("tasks reference-outputs: --tasks-dir is required")
	}
	present, missing, err := tasks.UpstreamSplits(*tasksDir, "biocoder", []string{"train", "test"})
	if err != nil {
		return err
	}
	if len(present) == 0 {
		return fmt.Errorf("tasks reference-outputs: %s has no biocoder task file (%s)", *tasksDir, strings.Join(missing, ", "))
	}
	log := NewLogger(stderr, "warn")
	cfg := sandbox.Config{Backend: *backend}
	var outs []tasks.BioCoderOutput
	var silent, failed int
	for _, split := range present {
		ts, err := tasks.LoadUpstream(ctx, tasks.Source{Dataset: "biocoder", Split: split, TasksDir: *tasksDir})
		if err != nil {
			return err
		}
		for _, t := range ts {
			x := t.Truth.Extra
			code, harness := x["solution"], t.View.Harness
			if code == "" { // no solution field: upstream's code is the context already filled in
				code, harness = x["code"], ""
			}
			params, _ := json.Marshal(map[string]string{"code": code})
			req := schemas.ActionRequest{
				Ref: schemas.EpisodeRef{RunID: "refout", EpisodeID: "refout-" + split + "-" + x["upstream_line"], TaskID: t.View.ID,
					Dataset: "biocoder", Split: split},
				Action: schemas.Action{Name: schemas.ActionValidateCode, Params: params}, TimeoutSec: *timeout, Harness: harness,
			}
			res, err := sandbox.Exec(ctx, cfg, req, log)
			if err != nil {
				return fmt.Errorf("tasks reference-outputs: %s: %w", t.View.ID, err)
			}
			line, _ := strconv.Atoi(x["upstream_line"])
			o := tasks.BioCoderOutput{File: x["upstream_file"], Line: line, Idx: x["idx"], Status: res.Status,
				ExitCode: res.ExitCode, Stdout: res.Stdout, Message: res.Message}
			switch {
			case res.Status != schemas.StatusOK || res.ExitCode != 0:
				failed++
				fmt.Fprintf(stderr, "medgym: %s: the reference solution failed (%s, exit %d): strict mode will accept nothing for it\n",
					t.View.ID, res.Status, res.ExitCode)
			case strings.TrimSpace(res.Stdout) == "":
				silent++
				fmt.Fprintf(stderr, "medgym: %s: the reference solution prints nothing: strict mode will accept nothing for it\n", t.View.ID)
			}
			outs = append(outs, o)
		}
	}
	var b strings.Builder
	for _, o := range outs {
		line, _ := json.Marshal(o)
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(*tasksDir, tasks.BioCoderOutputsFile)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("tasks reference-outputs: %w", err)
	}
	fmt.Fprintf(stdout, "%d biocoder reference outputs written to %s (%d failed, %d silent: not gradable in strict mode)\n",
		len(outs), path, failed, silent)
	return nil
}

// cmdTasksLabels lists the label sets of every built-in dataset (the
// strict and the upstream-compatible verifier's defaults marked), or the
// labels one declared set changes, with their reasons and sources.
func cmdTasksLabels(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks labels", flag.ContinueOnError)
	fs.SetOutput(stderr)
	set := fs.String("set", "", "print the labels this declared set changes (e.g. "+tasks.MedCalcCorrected+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("usage: medgym tasks labels [--set ID]")
	}
	declared, err := tasks.DeclaredLabelSets()
	if err != nil {
		return err
	}
	if *set != "" {
		for _, ls := range declared {
			if ls.ID != *set {
				continue
			}
			fmt.Fprintf(stdout, "%s: %s\nbase: %s\nlicence: %s\n\n", ls.ID, ls.Description, ls.Base, ls.Licence)
			tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tWAS\tNOW\tREASON\tSOURCE")
			for _, l := range ls.Labels {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.TaskID, l.Was, l.Answer, l.Reason, l.Source)
			}
			return tw.Flush()
		}
		return fmt.Errorf("no declared label set %q (medgym tasks labels lists them)", *set)
	}
	byID := map[string]tasks.LabelSet{}
	for _, ls := range declared {
		byID[ls.ID] = ls
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tLABEL SET\tCHANGES\tDEFAULT FOR")
	for _, ds := range tasks.Datasets() {
		strict := tasks.StrictLabelSet(ds)
		for _, id := range tasks.LabelSetsOf(ds) {
			var def []string
			if id == strict {
				def = append(def, "strict")
			}
			if id == tasks.BaseLabelSet(ds) {
				def = append(def, "upstream")
			}
			changes := "-"
			if ls, ok := byID[id]; ok {
				changes = strconv.Itoa(len(ls.Labels))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ds, id, changes, strings.Join(def, ", "))
		}
	}
	return tw.Flush()
}
