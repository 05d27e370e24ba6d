package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
	"github.com/medgym/medgym/services/sandbox-worker/sandboxworker"
	"github.com/medgym/medgym/services/verifier/replay"
	"github.com/medgym/medgym/services/verifier/verifier"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// ErrChanged is returned (exit status 1) when a replay differs from the
// record.
var ErrChanged = errors.New("replay differs from the record")

// cmdReplay re-executes a stored run's actions and re-scores its episodes:
// a determinism check. See internal/replay.
func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return replayCommand(ctx, true, args, stdout, stderr)
}

// cmdRescore re-scores stored episodes with the current verifier (and the
// current task library's truths) from their stored outputs, running no
// agent code: which rewards and outcomes flip, and which episodes need a
// replay because a verdict may depend on output stored capped.
func cmdRescore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return replayCommand(ctx, false, args, stdout, stderr)
}

// replayCommand is `medgym replay` (exec: the logged actions run again in
// fresh sandboxes) and `medgym rescore` (the stored outputs re-scored).
func replayCommand(ctx context.Context, exec bool, args []string, stdout, stderr io.Writer) error {
	name := "replay"
	if !exec {
		name = "rescore"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeURL := fs.String("store", "runs", "trajectory store: a directory or s3://bucket/prefix")
	endpoint := fs.String("s3-endpoint", "", "S3 endpoint host:port (default $AWS_ENDPOINT_URL)")
	region := fs.String("s3-region", "", "S3 region (default $AWS_REGION)")
	insecure := fs.Bool("s3-insecure", false, "use plain HTTP for the S3 endpoint")
	runID := fs.String("run", "", "run id to "+name+" (required)")
	episodes := fs.String("episode", "", "only these episode ids, comma separated")
	mode := fs.String("verifier-mode", "", "re-score with strict or upstream rules (default: each episode's recorded mode)")
	write := fs.Bool("write", false, "write episodes re-scored under a different verifier version to run <run>-replay-<version hash>; "+
		"with --labels, every episode to <run>-replay-<version hash>-<label sets>")
	labels := fs.String("labels", "", "re-grade against these label sets, comma separated, one per dataset (`medgym tasks labels` lists them); "+
		"a dataset not named keeps the label set its rows record")
	var scoring verifier.Scoring // the verifier's reward flags, as configured for the run
	scoring.RegisterFlags(fs)
	data := fs.String("data", tasks.DataRoot(), "shared data root (task sources); env MEDGYM_DATA")
	library := fs.String("library", tasks.LibraryDir(), "generated task library, mounted into the sandbox like the run")
	tasksDir := fs.String("tasks-dir", "", "upstream MedAgentGym task folder (if the run used one)")
	var sw sandboxworker.Config // the sandbox-worker's flags, named as on medgym run
	if exec {
		registerComponent(fs, "sandbox-worker", &sw)
	}
	conc := fs.Int("concurrency", 2, "episodes replayed at once")
	logLevel := fs.String("log", "warn", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runID == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: medgym %s --store DIR|s3://... --run ID [--episode ID] [--verifier-mode strict|upstream] [--write]", name)
	}
	if err := scoring.Validate(); err != nil {
		return err
	}
	if exec {
		if err := sw.Validate(); err != nil {
			return err
		}
	}
	if *mode != "" {
		if _, err := verify.ParseMode(*mode); err != nil {
			return fmt.Errorf("--verifier-mode: %w", err)
		}
	}
	labelSets := splitList(*labels)
	if err := tasks.CheckLabelSets(labelSets); err != nil {
		return fmt.Errorf("--labels: %w", err)
	}
	st, err := store.Open(ctx, *storeURL, store.Options{Endpoint: *endpoint, Region: *region, UseSSL: !*insecure})
	if err != nil {
		return err
	}
	var rows []parquet.Row
	if exec {
		rows, err = st.ReadRun(ctx, *runID)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return fmt.Errorf("run %s: no episodes in store %s", *runID, st)
		}
		if want := splitList(*episodes); len(want) > 0 {
			rows, err = selectEpisodes(rows, want)
			if err != nil {
				return fmt.Errorf("run %s: %w", *runID, err)
			}
		}
	}
	var eo *schemas.EpisodeOptions
	if m, err := st.ReadManifest(ctx, *runID); err == nil {
		var spec schemas.RunSpec
		if json.Unmarshal(m.Config, &spec) == nil && spec.Options.MaxTurns > 0 {
			eo = &spec.Options
		}
	} else if !errors.Is(err, store.ErrNoManifest) {
		return err
	}
	if eo == nil {
		fmt.Fprintf(stderr, "run %s has no manifest with its options: replaying with the default episode options\n", *runID)
	}
	var ex replay.Executor
	if exec {
		logger := NewLogger(stderr, *logLevel)
		agent, cleanup, err := (&ServiceFlags{Library: *library, TasksDir: *tasksDir}).AgentTree()
		if err != nil {
			return err
		}
		defer cleanup()
		sw.Sandbox.DataRoot = agent
		sb, err := sandbox.New(ctx, sw.Sandbox, logger)
		if err != nil {
			return err
		}
		defer func() { _ = sb.Close() }()
		ex = sb
	}
	start := time.Now()
	hashes, err := tasks.LibraryHashes(*library)
	if *tasksDir != "" {
		hashes, err = tasks.UpstreamHashes(*tasksDir)
	}
	if err != nil {
		return err
	}
	opt := replay.Options{Tasks: tasks.NewCache(*data, *tasksDir, *library), Exec: ex, Hashes: hashes,
		Mode: *mode, Scoring: scoring, EpisodeOptions: eo, Concurrency: *conc, LabelSets: labelSets}
	var rep replay.Report
	if exec {
		rep, err = replay.Run(ctx, *runID, rows, opt)
	} else {
		rep, err = rescoreRun(ctx, st, *runID, splitList(*episodes), *write, opt)
	}
	if err != nil {
		return err
	}
	printReplay(stdout, name, rep, time.Since(start))
	if len(labelSets) > 0 {
		printFlips(stdout, labelSets, replay.FlipsOf(rep))
	}
	if *write {
		if err := writeRescored(ctx, st, rep, labelSets, stdout); err != nil {
			return err
		}
	}
	if n := len(rep.Changes()); n > 0 {
		return fmt.Errorf("run %s: %w: %d change(s) in %d episode(s)", *runID, ErrChanged, n, changedEpisodes(rep))
	}
	return nil
}

// rescoreRun re-scores a stored run file by file from the columns the
// verifier reads (parquet.ScoringColumns): a run of a million episodes
// never holds its messages or the model's text in memory. Only with
// write, which copies whole rows into a new run, are the rows read whole.
// ids, when given, restricts it to those episodes (all must be stored).
func rescoreRun(ctx context.Context, st *store.Store, runID string, ids []string, write bool, opt replay.Options) (replay.Report, error) {
	cols := parquet.ScoringColumns
	if write {
		cols = nil
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = false
	}
	rep := replay.Report{RunID: runID}
	err := st.ScanRun(ctx, runID, cols, func(rows []parquet.Row) error {
		if len(want) > 0 {
			kept := rows[:0]
			for _, r := range rows {
				if _, ok := want[r.EpisodeID]; ok {
					want[r.EpisodeID] = true
					kept = append(kept, r)
				}
			}
			rows = kept
		}
		if len(rows) == 0 {
			return nil
		}
		part, err := replay.Run(ctx, runID, rows, opt)
		if err != nil {
			return err
		}
		for i := range part.Episodes {
			if !write { // the report needs the scores, not the turns
				part.Episodes[i].Recorded.Turns, part.Episodes[i].Rescored.Turns = nil, nil
			}
		}
		rep.Episodes = append(rep.Episodes, part.Episodes...)
		return nil
	})
	if err != nil {
		return replay.Report{}, err
	}
	if len(rep.Episodes) == 0 && len(ids) == 0 {
		return replay.Report{}, fmt.Errorf("run %s: no episodes in store %s", runID, st)
	}
	for _, id := range ids {
		if !want[id] {
			return replay.Report{}, fmt.Errorf("run %s: episode %s is not stored", runID, id)
		}
	}
	return rep, nil
}

func selectEpisodes(rows []parquet.Row, ids []string) ([]parquet.Row, error) {
	by := make(map[string]parquet.Row, len(rows))
	for _, r := range rows {
		by[r.EpisodeID] = r
	}
	out := make([]parquet.Row, 0, len(ids))
	for _, id := range ids {
		r, ok := by[id]
		if !ok {
			return nil, fmt.Errorf("episode %s is not stored", id)
		}
		out = append(out, r)
	}
	return out, nil
}

func changedEpisodes(rep replay.Report) int {
	n := 0
	for _, e := range rep.Episodes {
		if len(e.Changes) > 0 {
			n++
		}
	}
	return n
}

// printReplay prints a summary line, then a table of the changes.
func printReplay(w io.Writer, name string, rep replay.Report, el time.Duration) {
	var recorded []parquet.Row
	var current []string
	seen := map[string]bool{}
	for _, e := range rep.Episodes {
		recorded = append(recorded, e.Recorded)
		if v := e.Rescored.VerifierVersion; v != "" && !seen[v] {
			seen[v] = true
			current = append(current, v)
		}
	}
	changes := rep.Changes()
	needs := 0
	for _, e := range rep.Episodes {
		if e.NeedsExecution {
			needs++
		}
	}
	fmt.Fprintf(w, "%s of run %s: %d episodes, %d actions re-executed in %s\n", name, rep.RunID, len(rep.Episodes),
		rep.Executed(), el.Round(time.Millisecond))
	if needs > 0 {
		fmt.Fprintf(w, "%d episode(s) re-scored from output stored capped: a verdict may differ on the full output (medgym replay runs them again)\n", needs)
	}
	fmt.Fprintf(w, "verifier: recorded %s, replayed %s\n", strings.Join(replay.Versions(recorded), ", "), strings.Join(current, ", "))
	if len(changes) == 0 {
		fmt.Fprintln(w, "no change: every observation, outcome and reward is as recorded")
		return
	}
	fmt.Fprintf(w, "%d change(s) in %d episode(s):\n", len(changes), changedEpisodes(rep))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EPISODE\tTASK\tTURN\tFIELD\tRECORDED\tREPLAYED")
	for _, c := range changes {
		turn := "-"
		if c.Turn >= 0 {
			turn = strconv.Itoa(c.Turn)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.EpisodeID, c.TaskID, turn, c.Field, cell(c.Recorded), cell(c.Replayed))
	}
	_ = tw.Flush()
}

// cell quotes a value on one short line.
func cell(s string) string {
	const maxRunes = 60
	q := strconv.Quote(s)
	if r := []rune(q); len(r) > maxRunes {
		q = string(r[:maxRunes-1]) + "…"
	}
	return q
}

// printFlips says what a re-grade under other label sets changes for
// training.
func printFlips(w io.Writer, labels []string, f replay.Flips) {
	fmt.Fprintf(w, "under %s: %d episode(s) change reward (%d up, %d down)\n", strings.Join(labels, ", "), f.Up+f.Down, f.Up, f.Down)
	fmt.Fprintf(w, "  SFT / rejection sampling (solved episodes): %d in, %d out\n", f.SFTIn, f.SFTOut)
	fmt.Fprintf(w, "  preference pairs (same task, different reward): %d reversed, %d new, %d gone\n", f.PairsReversed, f.PairsNew, f.PairsGone)
	fmt.Fprintf(w, "  GRPO groups (a task's episodes): %d change, %d with an advantage changing sign\n", f.Groups, f.GroupsSignFlip)
}

// writeRescored writes the episodes re-scored under a verifier version
// other than the recorded one to <run>-replay-<hash>, one new run per
// version, never into the recorded run. With label sets it writes every
// episode to <run>-replay-<hash>-<label sets>: the whole run under the new
// labels, which `trainer build` then reads like any run.
func writeRescored(ctx context.Context, st *store.Store, rep replay.Report, labels []string, w io.Writer) error {
	byRun := map[string][]parquet.Row{}
	var order []string
	skipped := 0
	for _, e := range rep.Episodes {
		if e.Failed() {
			skipped++
			continue
		}
		v := e.Rescored.VerifierVersion
		if v == e.Recorded.VerifierVersion && len(labels) == 0 {
			continue
		}
		id := replay.LabelsRunID(rep.RunID, v, labels)
		r := e.Rescored
		r.RunID = id
		if _, ok := byRun[id]; !ok {
			order = append(order, id)
		}
		byRun[id] = append(byRun[id], r)
	}
	if skipped > 0 {
		fmt.Fprintf(w, "write: %d episode(s) could not be replayed and are not written\n", skipped)
	}
	if len(order) == 0 {
		fmt.Fprintln(w, "write: nothing to write: every episode was scored by the current verifier version")
		return nil
	}
	for _, id := range order {
		rows := byRun[id]
		before := 0
		for _, r := range rows {
			ok, err := st.Has(ctx, id, r.EpisodeID)
			if err != nil {
				return err
			}
			if ok {
				before++
			}
		}
		keys, err := st.Write(ctx, rows)
		if err != nil {
			return fmt.Errorf("write re-scored rows to run %s: %w", id, err)
		}
		all, err := st.ReadRun(ctx, id)
		if err != nil {
			return err
		}
		cfg := map[string]any{"replay_of": rep.RunID, "verifier_version": rows[0].VerifierVersion, "verifier_mode": rows[0].VerifierMode}
		if len(labels) > 0 {
			cfg["label_sets"] = labels
		}
		m, err := store.NewManifest(id, all, cfg)
		if err != nil {
			return err
		}
		if err := st.WriteManifest(ctx, id, m); err != nil {
			return err
		}
		fmt.Fprintf(w, "write: run %s: %d episode(s) re-scored by %s (%d file(s) written, %d already there)\n",
			id, len(rows), rows[0].VerifierVersion, len(keys), before)
		if len(labels) > 0 {
			fmt.Fprintf(w, "training data under these labels: bin/trainer build --store %s --run %s --out DIR\n", st, id)
		}
	}
	return nil
}
