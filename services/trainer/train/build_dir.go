package train

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
)

// ManifestVersion is the version of manifest.json's layout.
const ManifestVersion = "1"

// Source is where trajectories come from; *store.Store is one.
type Source interface {
	Runs(ctx context.Context) ([]string, error)
	ReadRun(ctx context.Context, runID string) ([]parquet.Row, error)
}

// checkedSource is a Source that checks rows file by file, so an error
// names the file; *store.Store is one.
type checkedSource interface {
	ReadRunChecked(ctx context.Context, runID string, check func(*parquet.Row) error) ([]parquet.Row, error)
}

// ReadRun reads a run's rows for training, each checked by
// parquet.Row.Validate: a row with a missing, non-finite or impossible
// reward, negative token counts, an unknown schema version or an
// oversized text cell fails with an error naming the run, the file (when
// src is a *store.Store), the episode and the column, instead of training
// on it.
func ReadRun(ctx context.Context, src Source, runID string) ([]parquet.Row, error) {
	check := func(r *parquet.Row) error { return r.Validate() }
	if c, ok := src.(checkedSource); ok {
		rows, err := c.ReadRunChecked(ctx, runID, check)
		if err != nil {
			return nil, fmt.Errorf("training data: %w", err)
		}
		return rows, nil
	}
	rows, err := src.ReadRun(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	for i := range rows {
		if err := check(&rows[i]); err != nil {
			return nil, fmt.Errorf("training data: read run %s: %w", runID, err)
		}
	}
	return rows, nil
}

// Filter selects rows. Empty lists match everything.
type Filter struct {
	Runs             []string `json:"runs,omitempty"`
	Datasets         []string `json:"datasets,omitempty"`
	Split            string   `json:"split,omitempty"`
	Models           []string `json:"models,omitempty"`
	VerifierVersions []string `json:"verifier_versions,omitempty"`
	// IncludeInfra keeps the episodes Infra reports (never the model's
	// fault; excluded by default).
	IncludeInfra bool `json:"include_infra"`
}

// Infra reports an outcome that says nothing about the policy: the
// pipeline failed (infra_failure) or the sandbox did (sandbox_error, which
// the agent's code cannot forge: the sandbox decides it from bwrap's
// status, never from the code's output). A zero reward on such an episode
// would push down whatever the policy did, so training leaves them out.
func Infra(outcome string) bool {
	return schemas.Outcome(outcome).Excluded() || outcome == string(schemas.OutcomeSandboxError)
}

func (f Filter) keep(r *parquet.Row) bool {
	in := func(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }
	return in(f.Datasets, r.Dataset) && (f.Split == "" || f.Split == r.Split) && in(f.Models, r.Model) &&
		in(f.VerifierVersions, r.VerifierVersion) && (f.IncludeInfra || !Infra(r.Outcome))
}

// LoadStats counts what Load read and kept.
type LoadStats struct {
	RowsRead      int `json:"rows_read"`
	RowsKept      int `json:"rows_kept"`
	InfraExcluded int `json:"infra_excluded"`
}

// Load reads the selected runs (all runs when f.Runs is empty) and keeps
// the rows f selects. It returns the rows and the runs they came from.
func Load(ctx context.Context, src Source, f Filter) ([]parquet.Row, []string, LoadStats, error) {
	var st LoadStats
	runs := f.Runs
	if len(runs) == 0 {
		var err error
		if runs, err = src.Runs(ctx); err != nil {
			return nil, nil, st, err
		}
	}
	var rows []parquet.Row
	var used []string
	for _, id := range runs {
		rs, err := ReadRun(ctx, src, id)
		if err != nil {
			return nil, nil, st, err
		}
		n := len(rows)
		for i := range rs {
			st.RowsRead++
			if !f.IncludeInfra && Infra(rs[i].Outcome) {
				st.InfraExcluded++
			}
			if f.keep(&rs[i]) {
				rows = append(rows, rs[i])
			}
		}
		if len(rows) > n {
			used = append(used, id)
		}
	}
	st.RowsKept = len(rows)
	return rows, used, st, nil
}

// Manifest describes a build directory.
type Manifest struct {
	ManifestVersion  string         `json:"manifest_version"`
	SchemaVersion    string         `json:"trajectory_schema_version"`
	ContractVersion  string         `json:"contract_version"`
	CreatedAt        time.Time      `json:"created_at"`
	Store            string         `json:"store"`
	SourceRuns       []string       `json:"source_runs"`
	Filters          Filter         `json:"filters"`
	ObservationRole  string         `json:"observation_role"`
	SFTFormatErrors  string         `json:"sft_format_errors"`
	Lengths          LengthStats    `json:"token_lengths"`
	GRPO             GRPOConfig     `json:"grpo"`
	Load             LoadStats      `json:"load"`
	Counts           map[string]int `json:"counts"`
	Files            []string       `json:"files"`
	RowSchemaVersion []string       `json:"row_schema_versions"`
}

// GRPOConfig records the advantage settings in the manifest.
type GRPOConfig struct {
	Eps              float64 `json:"eps"`
	Scale            string  `json:"scale"`
	DropZeroVariance bool    `json:"drop_zero_variance"`
	FormatWeight     float64 `json:"format_weight"`
}

// Result is what Build produced.
type Result struct {
	Manifest Manifest
	DataCard string
	SFT      []SFTRecord
	Rejected []SFTRecord
	// TRL prompt/completion forms of SFT, Rejected and Verifier.
	SFTTRL, RejectedTRL, VerifierTRL []TRLRecord
	DPO                              []DPORecord
	Verifier                         []VerifierRecord
	GRPO                             []GRPORecord
}

// Build reads trajectories and writes every export under out:
//
//	sft/sft.{jsonl,parquet}            SFT: messages + per-message loss_mask (train_step.py; LLaMA-Factory openai style)
//	sft/trl.{jsonl,parquet}            SFT for TRL: prompt/completion, one record per assistant turn with loss
//	rejection/best_of_k.{jsonl,parquet} best successful sample per task (and rejection/trl.*)
//	dpo/dpo.{jsonl,parquet}            TRL preference pairs (prompt, chosen, rejected)
//	dpo/llamafactory.jsonl             LLaMA-Factory ranking pairs (single-message sides)
//	verifier/verifier.{jsonl,parquet}  YES/NO trajectories, balanced (and verifier/trl.*)
//	grpo/grpo.{jsonl,parquet}          GRPO groups with advantages
//	dataset_info.json, manifest.json, DATACARD.md
func Build(ctx context.Context, src Source, storeName string, f Filter, o Options, out string) (Result, error) {
	rows, runs, ls, err := Load(ctx, src, f)
	if err != nil {
		return Result{}, err
	}
	if o.ObsRole == "" {
		o.ObsRole = ObsSampled
	}
	if o.SFTFormatErrors == "" {
		o.SFTFormatErrors = FormatMask
	}
	if o.GRPO.Eps == 0 {
		o.GRPO.Eps = 1e-6
	}
	if o.GRPO.Scale == "" {
		o.GRPO.Scale = "group"
	}
	eps := make([]*Episode, len(rows))
	for i := range rows {
		eps[i] = NewEpisode(&rows[i], o.ObsRole)
	}
	res := Result{DPO: DPO(eps, o), Verifier: Verifier(eps, o)}
	var sst SFTStats
	res.SFT, sst = SFT(eps, o.SFTFormatErrors)
	var rejectedTasks int
	res.Rejected, rejectedTasks = RejectionSample(eps, o.SFTFormatErrors)
	renamed := 0
	for _, e := range eps {
		if !e.SameContext {
			renamed++
		}
	}
	res.SFTTRL, res.RejectedTRL, res.VerifierTRL = TRLSFT(res.SFT), TRLSFT(res.Rejected), TRLVerifier(res.Verifier)
	var gst GRPOStats
	res.GRPO, gst = GRPO(eps, o.GRPO)

	var files []string
	add := func(fs []string, err error) error {
		files = append(files, fs...)
		return err
	}
	var lf []lfPair
	counts := map[string]int{"episodes": len(rows), "sft": len(res.SFT), "rejection_sampled": len(res.Rejected),
		"rejection_tasks_without_success": rejectedTasks, "verifier": len(res.Verifier),
		"sft_trl": len(res.SFTTRL), "rejection_sampled_trl": len(res.RejectedTRL), "verifier_trl": len(res.VerifierTRL),
		"grpo_samples": gst.Samples, "grpo_groups": gst.Groups, "grpo_zero_variance_groups": gst.ZeroVariance,
		"grpo_dropped_zero_variance_groups": gst.DroppedZeroVariance,
		"sft_format_error_turns_masked":     sst.FormatErrorTurnsMasked, "sft_format_error_episodes_dropped": sst.FormatErrorEpisodesDrop,
		"episodes_rendered_unlike_sampled": renamed}
	for _, p := range res.DPO {
		counts["dpo_"+p.Kind]++
		if len(p.Chosen) == 1 && len(p.Rejected) == 1 {
			lf = append(lf, lfPair{Messages: p.Prompt, Chosen: p.Chosen[0], Rejected: p.Rejected[0]})
		}
	}
	counts["dpo"] = len(res.DPO)
	counts["dpo_llamafactory"] = len(lf)
	for _, v := range res.Verifier {
		counts["verifier_"+strings.ToLower(v.Label)]++
	}
	if err := firstErr(
		add(writeBoth(out, "sft/sft", SFTSchema, res.SFT)),
		add(writeBoth(out, "sft/trl", TRLSchema, res.SFTTRL)),
		add(writeBoth(out, "rejection/best_of_k", SFTSchema, res.Rejected)),
		add(writeBoth(out, "rejection/trl", TRLSchema, res.RejectedTRL)),
		add(writeBoth(out, "dpo/dpo", DPOSchema, res.DPO)),
		add(writeBoth(out, "verifier/verifier", VerifierSchema, res.Verifier)),
		add(writeBoth(out, "verifier/trl", TRLSchema, res.VerifierTRL)),
		add(writeBoth(out, "grpo/grpo", GRPOSchema, res.GRPO)),
	); err != nil {
		return res, err
	}
	if _, err := WriteJSONL(filepath.Join(out, "dpo/llamafactory.jsonl"), lf); err != nil {
		return res, err
	}
	files = append(files, "dpo/llamafactory.jsonl")

	tags := llamaFactoryTags(exportObsRole(o.ObsRole, eps))
	info := map[string]any{
		"medgym_sft": map[string]any{"file_name": "sft/sft.jsonl", "formatting": "sharegpt",
			"columns": map[string]string{"messages": "messages"}, "tags": tags},
		"medgym_rejection": map[string]any{"file_name": "rejection/best_of_k.jsonl", "formatting": "sharegpt",
			"columns": map[string]string{"messages": "messages"}, "tags": tags},
		"medgym_dpo": map[string]any{"file_name": "dpo/llamafactory.jsonl", "formatting": "sharegpt", "ranking": true,
			"columns": map[string]string{"messages": "messages", "chosen": "chosen", "rejected": "rejected"}, "tags": tags},
		"medgym_verifier": map[string]any{"file_name": "verifier/verifier.jsonl", "formatting": "sharegpt",
			"columns": map[string]string{"messages": "messages"}, "tags": tags},
	}
	if err := writeJSON(filepath.Join(out, "dataset_info.json"), info); err != nil {
		return res, err
	}
	files = append(files, "dataset_info.json")

	versions := map[string]bool{}
	for i := range rows {
		versions[rows[i].SchemaVersion] = true
	}
	res.Manifest = Manifest{ManifestVersion: ManifestVersion, SchemaVersion: parquet.SchemaVersion,
		ContractVersion: schemas.Version, CreatedAt: time.Now().UTC(), Store: storeName, SourceRuns: orEmpty(runs),
		Filters: f, ObservationRole: o.ObsRole, SFTFormatErrors: o.SFTFormatErrors, Lengths: TokenLengths(eps),
		GRPO: GRPOConfig{Eps: o.GRPO.Eps, Scale: o.GRPO.Scale, DropZeroVariance: o.GRPO.DropZeroVariance, FormatWeight: o.GRPO.FormatWeight},
		Load: ls, Counts: counts, Files: append(files, "manifest.json", "DATACARD.md"),
		RowSchemaVersion: sortedKeys(versions)}
	if err := writeJSON(filepath.Join(out, "manifest.json"), res.Manifest); err != nil {
		return res, err
	}
	res.DataCard = DataCard(eps, res.Manifest)
	if err := writeFile(filepath.Join(out, "DATACARD.md"), []byte(res.DataCard)); err != nil {
		return res, err
	}
	return res, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return writeFile(path, append(b, '\n'))
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// DataCard renders a short Markdown summary: per dataset, episodes,
// success share, mean turns and mean tokens; then the export counts.
func DataCard(eps []*Episode, m Manifest) string {
	type agg struct {
		n, ok         int
		turns, tokens int64
		tasks         map[string]bool
	}
	by := map[string]*agg{}
	for _, e := range eps {
		a := by[e.Row.Dataset]
		if a == nil {
			a = &agg{tasks: map[string]bool{}}
			by[e.Row.Dataset] = a
		}
		a.n++
		if e.Success() {
			a.ok++
		}
		a.turns += int64(e.Row.NumTurns)
		a.tokens += e.Tokens()
		a.tasks[e.TaskKey()] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# medgym training data\n\nSource: %s, runs %s. Trajectory schema %s. Infra and sandbox failures %s.\n\n",
		m.Store, strings.Join(m.SourceRuns, ", "), m.SchemaVersion,
		map[bool]string{true: "included", false: fmt.Sprintf("excluded (%d)", m.Load.InfraExcluded)}[m.Filters.IncludeInfra])
	b.WriteString("| dataset | tasks | episodes | success | mean turns | mean tokens |\n|---|---|---|---|---|---|\n")
	for _, ds := range sortedKeys(by) {
		a := by[ds]
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f%% | %.2f | %.0f |\n", ds, len(a.tasks), a.n,
			100*float64(a.ok)/float64(a.n), float64(a.turns)/float64(a.n), float64(a.tokens)/float64(a.n))
	}
	b.WriteString("\n| export | records |\n|---|---|\n")
	for _, k := range sortedKeys(m.Counts) {
		fmt.Fprintf(&b, "| %s | %d |\n", k, m.Counts[k])
	}
	b.WriteString("\nTokens are usage totals reported by the endpoint (characters/4 where none was reported).\n")
	l := m.Lengths
	fmt.Fprintf(&b, "\n## Conversation length (tokens)\n\nThe whole conversation of each episode as the model last saw it "+
		"(the last turn's prompt + completion tokens; characters/4 where the endpoint reported none), the length a training "+
		"step must fit (`train_step.py --max-len`, default %d):\n\n", DefaultMaxLen)
	fmt.Fprintf(&b, "| episodes | p50 | p90 | p99 | max | fit 2048 | fit 4096 | fit 8192 | fit 16384 |\n|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", l.N, l.P50, l.P90, l.P99, l.Max,
		l.Fit[2048], l.Fit[4096], l.Fit[8192], l.Fit[16384])
	fmt.Fprintf(&b, "\nObservations are rendered with role `%s`; %d episode(s) are rendered unlike they were sampled. "+
		"SFT: %d format-error turn(s) carry no loss, %d episode(s) dropped for format errors (policy `%s`).\n",
		m.ObservationRole, m.Counts["episodes_rendered_unlike_sampled"], m.Counts["sft_format_error_turns_masked"],
		m.Counts["sft_format_error_episodes_dropped"], m.SFTFormatErrors)
	return b.String()
}

// DefaultMaxLen is train_step.py's default --max-len (keep them equal).
const DefaultMaxLen = 8192

// LengthStats is the token-length distribution of the conversations.
type LengthStats struct {
	N   int `json:"n"`
	P50 int `json:"p50"`
	P90 int `json:"p90"`
	P99 int `json:"p99"`
	Max int `json:"max"`
	// Fit counts the conversations of at most that many tokens.
	Fit map[int]int `json:"fit"`
}

// ConversationTokens estimates an episode's whole length in tokens: the
// last turn's prompt plus completion tokens (what the endpoint counted for
// the longest context it saw), or characters/4 when it reported none.
func (e *Episode) ConversationTokens() int {
	if n := len(e.Row.Turns); n > 0 {
		if t := e.Row.Turns[n-1]; t.PromptTokens > 0 {
			return int(t.PromptTokens + t.CompletionTokens)
		}
	}
	c := 0
	for _, m := range e.Row.Messages {
		c += len(m.Content)
	}
	return c / 4
}

// TokenLengths summarises ConversationTokens over the episodes.
func TokenLengths(eps []*Episode) LengthStats {
	st := LengthStats{N: len(eps), Fit: map[int]int{}}
	if len(eps) == 0 {
		return st
	}
	ls := make([]int, len(eps))
	for i, e := range eps {
		ls[i] = e.ConversationTokens()
	}
	slices.Sort(ls)
	q := func(p float64) int { return ls[min(len(ls)-1, int(p*float64(len(ls))))] }
	st.P50, st.P90, st.P99, st.Max = q(0.5), q(0.9), q(0.99), ls[len(ls)-1]
	for _, lim := range []int{2048, 4096, 8192, 16384} {
		st.Fit[lim] = sort.SearchInts(ls, lim+1)
	}
	return st
}

// exportObsRole is the observation role the files hold: the one asked for,
// or, for "sampled", the role the episodes were sampled with (user when
// they disagree, which no llm-worker does).
func exportObsRole(asked string, eps []*Episode) string {
	if asked != ObsSampled {
		return asked
	}
	for _, e := range eps {
		if e.Row.ObsRole() != RoleUser {
			return e.Row.ObsRole()
		}
	}
	return RoleUser
}
