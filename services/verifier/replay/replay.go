package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/verifier/verifier"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/tasks"
)

// Executor runs actions in per-episode workspaces; the sandbox-worker's
// Sandbox is one.
type Executor interface {
	Execute(ctx context.Context, req schemas.ActionRequest) (schemas.ExecResult, error)
	Release(episodeID string) error
}

// Options configure Run.
type Options struct {
	// Tasks gives each episode's task: resources, permitted actions, truth.
	Tasks *tasks.Cache
	// Exec runs the logged actions again; nil re-scores the stored
	// outputs without running anything.
	Exec Executor
	// Mode is the verifier mode to re-score with; "" is each row's own mode.
	Mode string
	// Scoring are the verifier's reward settings, as configured for the
	// run (the zero value is the services' default).
	Scoring verifier.Scoring
	// Episode options of the run (from its manifest); nil: the defaults.
	// They say which actions were checked, the action timeout and the loop
	// guard.
	EpisodeOptions *schemas.EpisodeOptions
	// Concurrency is the number of episodes replayed at once (< 1: 1).
	Concurrency int
	// Hashes are the task trees replayed with, recorded in the rescored
	// rows (the recorded rows keep theirs).
	Hashes schemas.TreeHashes
	// LabelSets re-grades against these label sets (one per dataset, see
	// tasks.CheckLabelSets); a dataset not named keeps the label set its
	// row records (or, for rows older than the column, the mode's
	// default).
	LabelSets []string
}

// Change is one difference between the record and the replay.
type Change struct {
	EpisodeID string
	TaskID    string
	// Turn is the turn index, or -1 for an episode-level field.
	Turn int
	// Field is exec_status, exit_code, stdout, stderr, truncated, accepted,
	// outcome, reward or error (the episode could not be replayed).
	Field    string
	Recorded string
	Replayed string
}

// Episode is the replay of one episode.
type Episode struct {
	// Recorded is the stored row.
	Recorded parquet.Row
	// Rescored is the row as the current verifier scores the replay: the
	// replayed turns, outcome, reward, verifier version and mode (same run
	// id as the record).
	Rescored parquet.Row
	// Executed counts the turns run again.
	Executed int
	// NeedsExecution: re-scored from stored outputs, and a turn that
	// reached the sandbox has output the row stores capped, on which a
	// verdict may depend (re-scoring without an executor only).
	NeedsExecution bool
	Verdict        string
	Changes        []Change
}

// Report is the replay of a run.
type Report struct {
	RunID    string
	Episodes []Episode
}

// Changes returns every change, in episode and turn order.
func (r Report) Changes() []Change {
	var out []Change
	for _, e := range r.Episodes {
		out = append(out, e.Changes...)
	}
	return out
}

// Executed counts the turns run again over all episodes.
func (r Report) Executed() int {
	n := 0
	for _, e := range r.Episodes {
		n += e.Executed
	}
	return n
}

// Run replays rows (one run's episodes) and returns the report in the order
// of rows. An error is returned only when ctx ends; an episode that cannot
// be replayed is reported as a Change with Field "error".
func Run(ctx context.Context, runID string, rows []parquet.Row, opt Options) (Report, error) {
	if opt.Tasks == nil {
		return Report{}, errors.New("replay: Tasks is required")
	}
	if opt.Mode != "" {
		m, err := verify.ParseMode(opt.Mode)
		if err != nil {
			return Report{}, fmt.Errorf("replay: %w", err)
		}
		opt.Mode = string(m)
	}
	eo := schemas.DefaultOptions()
	if opt.EpisodeOptions != nil {
		eo = *opt.EpisodeOptions
	}
	out := make([]Episode, len(rows))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, opt.Concurrency))
	for i := range rows {
		g.Go(func() error {
			out[i] = replayEpisode(gctx, rows[i], eo, opt)
			return gctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return Report{}, fmt.Errorf("replay of run %s: %w", runID, err)
	}
	if err := ctx.Err(); err != nil {
		return Report{}, fmt.Errorf("replay of run %s: %w", runID, err)
	}
	return Report{RunID: runID, Episodes: out}, nil
}

func replayEpisode(ctx context.Context, row parquet.Row, eo schemas.EpisodeOptions, opt Options) Episode {
	ep := Episode{Recorded: row}
	fail := func(err error) Episode {
		ep.Changes = append(ep.Changes, Change{EpisodeID: row.EpisodeID, TaskID: row.TaskID, Turn: -1,
			Field: "error", Recorded: "", Replayed: err.Error()})
		return ep
	}
	task, err := opt.Tasks.Task(ctx, row.Dataset, row.Split, row.TaskID)
	if err != nil {
		return fail(err)
	}
	mode := opt.Mode
	if mode == "" {
		mode = row.VerifierMode
	}
	m, err := verify.ParseMode(mode)
	if err != nil {
		return fail(err)
	}
	mode = string(m)
	sets := opt.LabelSets
	if row.LabelSet != "" && !namesDataset(sets, row.Dataset) {
		sets = append(slices.Clip(sets), row.LabelSet)
	}
	truth, err := task.TruthFor(m == verify.Upstream, sets)
	if err != nil {
		return fail(err)
	}
	if row.LabelSet != "" && truth.LabelSet != row.LabelSet {
		ep.Changes = append(ep.Changes, Change{EpisodeID: row.EpisodeID, TaskID: row.TaskID, Turn: -1,
			Field: "label_set", Recorded: row.LabelSet, Replayed: truth.LabelSet})
	}
	if opt.Exec != nil {
		defer func() { _ = opt.Exec.Release(row.EpisodeID) }()
	}

	turns := make([]schemas.Turn, len(row.Turns))
	for i, t := range row.Turns {
		turns[i] = toTurn(t)
	}
	change := func(turn int, field, rec, rep string) {
		ep.Changes = append(ep.Changes, Change{EpisodeID: row.EpisodeID, TaskID: row.TaskID, Turn: turn,
			Field: field, Recorded: rec, Replayed: rep})
	}
	for i := range row.Turns {
		if !executed(task.View, row.Turns, i, eo) {
			continue
		}
		t := row.Turns[i]
		req := schemas.ActionRequest{
			Ref: schemas.EpisodeRef{RunID: row.RunID, EpisodeID: row.EpisodeID, TaskID: row.TaskID,
				Dataset: row.Dataset, Split: row.Split, Turn: i},
			Action:       schemas.Action{Name: t.Action, Params: json.RawMessage(t.ParamsJSON)},
			Resources:    task.View.Resources,
			OutputFiles:  task.View.OutputFiles,
			Harness:      task.View.Harness,
			TimeoutSec:   max(1, eo.ActionTimeoutSec),
			Check:        t.Action == schemas.ActionValidateCode && eo.EndOn != schemas.EndOnAnswer,
			VerifierMode: mode,
		}
		if opt.Exec == nil {
			// Re-score the stored output: what the verifier saw, unless it
			// was capped for storage.
			if t.StdoutBytes > int64(len(t.Stdout)) || t.StderrBytes > int64(len(t.Stderr)) {
				ep.NeedsExecution = true
			}
			if req.Check {
				c := verify.CheckOutput(m, row.Dataset, truth, execOfStored(turns[i]))
				if c.Accepted != t.Accepted {
					change(i, "accepted", strconv.FormatBool(t.Accepted), strconv.FormatBool(c.Accepted))
				}
				turns[i].Accepted = c.Accepted
			}
			continue
		}
		res, err := opt.Exec.Execute(ctx, req)
		if err != nil {
			return fail(fmt.Errorf("turn %d: %w", i, err))
		}
		ep.Executed++
		// Compare (and store) outputs in the form turns keep them.
		stdout, stdoutBytes := schemas.CapStored(res.Stdout, res.StdoutBytes)
		stderr, stderrBytes := schemas.CapStored(res.Stderr, res.StderrBytes)
		res.Truncated = res.Truncated || stdout != res.Stdout || stderr != res.Stderr
		res.Stdout, res.Stderr = stdout, stderr
		if res.Status != t.ExecStatus {
			change(i, "exec_status", t.ExecStatus, res.Status)
		}
		if int32(res.ExitCode) != t.ExitCode {
			change(i, "exit_code", strconv.Itoa(int(t.ExitCode)), strconv.Itoa(res.ExitCode))
		}
		if res.Stdout != t.Stdout {
			change(i, "stdout", t.Stdout, res.Stdout)
		}
		if res.Stderr != t.Stderr {
			change(i, "stderr", t.Stderr, res.Stderr)
		}
		if res.Truncated != t.Truncated {
			change(i, "truncated", strconv.FormatBool(t.Truncated), strconv.FormatBool(res.Truncated))
		}
		if t.FilesJSON != "" || len(res.Files) > 0 {
			if got := filesJSON(res.Files); got != t.FilesJSON {
				change(i, "files", t.FilesJSON, got)
			}
		}
		nt := &turns[i]
		nt.Files = res.Files
		nt.ExecStatus, nt.ExitCode, nt.Stdout, nt.Stderr = res.Status, res.ExitCode, res.Stdout, res.Stderr
		nt.Truncated, nt.DurationMS = res.Truncated, res.DurationMS
		nt.StdoutBytes, nt.StderrBytes = stdoutBytes, stderrBytes
		if req.Check {
			c := verify.CheckOutput(m, row.Dataset, truth, res)
			if c.Accepted != t.Accepted {
				change(i, "accepted", strconv.FormatBool(t.Accepted), strconv.FormatBool(c.Accepted))
			}
			nt.Accepted = c.Accepted
		}
	}

	res := episodeResult(row, task.View, eo, mode, turns)
	outcome, reward, verdict := verify.Score(opt.Scoring.Options(m), truth, res)
	ep.Verdict = verdict
	if string(outcome) != row.Outcome {
		change(-1, "outcome", row.Outcome, string(outcome))
	}
	if reward != row.Reward {
		change(-1, "reward", fmtFloat(row.Reward), fmtFloat(reward))
	}
	ep.Rescored = rescored(row, turns, outcome, reward, verdict, mode)
	ep.Rescored.LabelSet = truth.LabelSet
	ep.Rescored.AgentTreeHash, ep.Rescored.VerifierTreeHash = opt.Hashes.Agent, opt.Hashes.Verifier
	return ep
}

// executed reports whether turn i of a recorded episode reached the
// sandbox, following the llm-worker's rules: the action parsed, is a
// sandbox action, is permitted for the task, was not a repeat stopped or
// warned by the loop guard, and got an observation.
func executed(view schemas.TaskView, turns []parquet.Turn, i int, eo schemas.EpisodeOptions) bool {
	t := turns[i]
	if t.ParseError != "" || t.ExecStatus == "" {
		return false
	}
	switch t.Action {
	case schemas.ActionValidateCode, schemas.ActionTerminal, schemas.ActionRequestInfo:
	default:
		return false
	}
	// Under compat upstream every one of these actions ran, advertised or not.
	if len(view.PermittedActions) > 0 && !contains(view.PermittedActions, t.Action) && !eo.Upstream() {
		return false
	}
	if i > 0 && eo.LoopGuard != "off" {
		p := turns[i-1]
		if p.ParseError == "" && p.Action == t.Action && p.ParamsJSON == t.ParamsJSON {
			return false
		}
	}
	return true
}

// namesDataset reports whether sets holds a label set of dataset.
func namesDataset(sets []string, dataset string) bool {
	for _, id := range sets {
		if strings.HasPrefix(id, dataset+"@") {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// episodeResult rebuilds what the verifier scored from a row.
func episodeResult(row parquet.Row, view schemas.TaskView, eo schemas.EpisodeOptions, mode string, turns []schemas.Turn) schemas.EpisodeResult {
	view.ID, view.Dataset, view.Category, view.Split = row.TaskID, row.Dataset, row.Category, row.Split
	eo.VerifierMode = mode
	pol := schemas.PolicySpec{Name: row.Policy, Model: row.Model, Version: int(row.PolicyVersion)}
	if row.Temperature != nil {
		t := *row.Temperature
		pol.Temperature = &t
	}
	msgs := make([]schemas.ChatMessage, len(row.Messages))
	for i, m := range row.Messages {
		msgs[i] = schemas.ChatMessage{Role: m.Role, Content: m.Content}
	}
	return schemas.EpisodeResult{
		Request: schemas.EpisodeRequest{RunID: row.RunID, EpisodeID: row.EpisodeID, SampleIndex: int(row.SampleIndex),
			Task: view, Policy: pol, Options: eo, Attempt: int(row.Attempt)},
		Turns: turns, Messages: msgs, FinalAnswer: row.FinalAnswer, Termination: schemas.Termination(row.Termination),
		Error: row.Error, StartedAt: row.StartedAt, FinishedAt: row.FinishedAt,
	}
}

// rescored is the recorded row with the replayed turns and the new score.
// The error column keeps the recorded text when the outcome is unchanged
// (its worker part cannot be told from the old verdict); a changed outcome
// gets the new verdict.
func rescored(row parquet.Row, turns []schemas.Turn, outcome schemas.Outcome, reward float64, verdict, mode string) parquet.Row {
	r := row
	r.Turns = make([]parquet.Turn, len(row.Turns))
	for i, t := range row.Turns {
		n := turns[i]
		t.ExecStatus, t.ExitCode, t.Stdout, t.Stderr = n.ExecStatus, int32(n.ExitCode), n.Stdout, n.Stderr
		t.Truncated, t.DurationMS, t.Accepted = n.Truncated, n.DurationMS, n.Accepted
		r.Turns[i] = t
	}
	if string(outcome) != row.Outcome {
		r.Error = ""
		if outcome != schemas.OutcomeCorrect {
			r.Error = verdict
		}
	}
	r.Outcome, r.Reward = string(outcome), reward
	r.VerifierVersion, r.VerifierMode = verify.VersionFor(verify.Mode(mode)), mode
	return r
}

// filesJSON encodes output files as the trajectory column does.
func filesJSON(files map[string]string) string {
	if len(files) == 0 {
		return ""
	}
	b, _ := json.Marshal(files) // a map of strings always marshals
	return string(b)
}

func toTurn(t parquet.Turn) schemas.Turn {
	var files map[string]string
	if t.FilesJSON != "" {
		_ = json.Unmarshal([]byte(t.FilesJSON), &files) // a bad value leaves the turn without files
	}
	return schemas.Turn{Files: files,
		Index: int(t.Index), RawText: t.RawText, Reasoning: t.Reasoning, FinishReason: t.FinishReason,
		ActionName: t.Action, ParamsJSON: t.ParamsJSON, ParseError: t.ParseError, Observation: t.Observation,
		ExecStatus: t.ExecStatus, ExitCode: int(t.ExitCode), Stdout: t.Stdout, Stderr: t.Stderr,
		Truncated: t.Truncated, Accepted: t.Accepted, DurationMS: t.DurationMS, LLMLatencyMS: t.LLMLatencyMS,
		PromptTokens: int(t.PromptTokens), CompletionTokens: int(t.CompletionTokens),
		PromptTokenIDs: t.PromptTokenIDs, CompletionTokenIDs: t.CompletionTokenIDs, CompletionLogprobs: t.CompletionLogprobs,
		StdoutBytes: t.StdoutBytes, StderrBytes: t.StderrBytes,
	}
}

// execOfStored is a stored turn's execution as the verifier checked it.
func execOfStored(t schemas.Turn) schemas.ExecResult {
	return schemas.ExecResult{Status: t.ExecStatus, ExitCode: t.ExitCode, Stdout: t.Stdout, Stderr: t.Stderr,
		Truncated: t.Truncated, DurationMS: t.DurationMS, Files: t.Files, StdoutBytes: t.StdoutBytes, StderrBytes: t.StderrBytes}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// RunID is the run id rows re-scored under verifier version v are written
// to: <run>-replay-<hash>, the hash being the version's rule-source hash
// (the part after the last "."), or a cleaned copy of the whole version
// when it has none.
func RunID(run, version string) string {
	h := version
	if i := strings.LastIndex(version, "."); i >= 0 && i+1 < len(version) {
		h = version[i+1:]
	}
	h = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, h)
	return run + "-replay-" + h
}

// LabelsRunID is the run id rows re-scored under verifier version v and
// the label sets labels are written to: RunID's, then the label sets
// (cleaned, joined with "_"; a hash of them when that is long).
func LabelsRunID(run, version string, labels []string) string {
	id := RunID(run, version)
	if len(labels) == 0 {
		return id
	}
	sorted := slices.Sorted(slices.Values(labels))
	tag := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, strings.Join(sorted, "_"))
	if len(tag) > 64 {
		h := sha256.Sum256([]byte(strings.Join(sorted, ",")))
		tag = "labels-" + hex.EncodeToString(h[:])[:12]
	}
	return id + "-" + tag
}

// Versions returns the distinct recorded verifier versions of rows, in
// first-seen order.
func Versions(rows []parquet.Row) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.VerifierVersion] {
			seen[r.VerifierVersion] = true
			out = append(out, r.VerifierVersion)
		}
	}
	return out
}

// Failed reports whether the episode could not be replayed (its Rescored
// row is then empty).
func (e Episode) Failed() bool {
	for _, c := range e.Changes {
		if c.Field == "error" {
			return true
		}
	}
	return false
}
