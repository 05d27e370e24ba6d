// Package report turns the trajectory rows of one run into a Markdown report
// with SVG charts: success rates per dataset and category, Pass@k and Best@k
// curves over the K samples of each task, the turn-count and action-mix
// histograms, token usage and cost, and the outcome breakdown.
//
// Conventions, stated once:
//   - infra_failure episodes are never the model's fault: they are counted in
//     the outcome breakdown and left out of every success rate, Pass@k and
//     Best@k;
//   - a task is (dataset, split, task id); its samples are its rows;
//   - Pass@k is the unbiased estimator 1 − C(n−c, k)/C(n, k) (Chen et al.
//     2021) per task with n scored samples of which c are correct, averaged
//     over the tasks with n ≥ k;
//   - Best@k is the paper's metric: among a task's first k scored samples (in
//     sample-index order) a trajectory verifier (a reward model trained on
//     trainer build's verifier/ export; its scores come in Options.Scores)
//     picks the highest-scoring one; Best@k is the share of tasks (with
//     n ≥ k) whose pick is correct. Without scores there is no Best@k.
//   - Oracle@k is not Best@k: it picks the sample that ended on its own,
//     with an accepted code execution or an explicit answer (termination
//     "accepted" or "answered"), with the fewest turns (else the fewest
//     turns; ties: the lower sample index). Under --end-on accepted the
//     "accepted" termination comes from the ground-truth check, so this
//     pick uses the answer key and Oracle@k ≈ Pass@k; it is reported as an
//     upper bound, named for what it is.
//   - "correct" counts the episodes that reached the task's correct outcome
//     (schemas.Outcome.Solved): a correct answer, or on a task that offers
//     abstention (EHRSQL 2024) a correct abstention;
//   - the reliability score RS(c) of EHRSQL 2024 (Lee et al. 2024) is the
//     mean per-episode score over the scored episodes of a dataset: +1
//     solved, 0 abstained on an answerable question, −1 × c anything else;
//     c = N is the number of scored episodes. It is reported for the
//     datasets that offer abstention (Options.Abstention) and for any
//     dataset whose rows hold an abstention outcome.
//   - the constant-answer baseline of a dataset (Options.Baselines,
//     BestConstant) is the one answer that, given to every distinct task of
//     the run, the most tasks accept under the verifier's rule, from the
//     library's verifier tree; it is shown beside the model's success.
package report

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
)

// Options configure a report.
type Options struct {
	// PriceIn and PriceOut are USD per 1M prompt and completion tokens.
	PriceIn, PriceOut float64
	// Scores are trajectory-verifier scores by episode id (higher: more
	// likely solved); Verifier names the model that gave them. With scores
	// the report has Best@k.
	Scores   map[string]float64
	Verifier string
	// Abstention lists the datasets that offer abstention, whose
	// reliability score is reported even if no episode abstained.
	Abstention []string
	// Baselines are the datasets' best constant answers (BestConstant),
	// shown beside the model's success.
	Baselines []Baseline
}

// Reliability is EHRSQL 2024's reliability score of one dataset.
type Reliability struct {
	Dataset string
	// Scored episodes (infra failures excluded); Solved (+1), Abstained on
	// an answerable question (0) and Wrong (−1: wrong answers, answers to
	// unanswerable questions, no answer).
	Scored, Solved, Abstained, Wrong int
}

// RS is the reliability score with penalty c: (Solved − c·Wrong)/Scored.
func (r Reliability) RS(c float64) float64 {
	if r.Scored == 0 {
		return 0
	}
	return (float64(r.Solved) - c*float64(r.Wrong)) / float64(r.Scored)
}

// RSPenalties are the fixed penalties reported, as EHRSQL 2024 does; the
// report adds c = N (the number of scored episodes).
var RSPenalties = []float64{0, 5, 10}

// Group is the success rate of one dataset or category.
type Group struct {
	Name     string
	Episodes int // all episodes, infra failures included
	Scored   int // episodes minus infra failures
	Correct  int
}

// Rate is Correct/Scored (0 when nothing was scored).
func (g Group) Rate() float64 { return ratio(g.Correct, g.Scored) }

// Count is a labelled count.
type Count struct {
	Name string
	N    int
}

// AtK holds Pass@k, Best@k (verifier-chosen; only with scores) and
// Oracle@k for one k.
type AtK struct {
	K      int
	Tasks  int // tasks with at least k scored samples
	Pass   float64
	Best   float64
	Oracle float64
}

// Report is what a run's rows say.
type Report struct {
	RunID      string
	Episodes   int
	Scored     int
	Correct    int
	Tasks      int
	K          int // the most scored samples any task has
	Outcomes   []Count
	ByDataset  []Group
	ByCategory []Group
	AtK        []AtK
	// Verifier names the trajectory verifier that chose Best@k ("": no
	// scores, no Best@k).
	Verifier string
	// Unscored counts scored episodes the verifier gave no score (they are
	// never picked while a scored sample exists).
	Unscored int
	Turns    []Count // Name is the turn count
	Actions  []Count
	Tokens   Tokens
	// Reliability holds one entry per dataset that offers abstention.
	Reliability []Reliability
	// Baselines are Options.Baselines.
	Baselines []Baseline
}

// Tokens is token usage and cost.
type Tokens struct {
	Prompt, Completion int64
	PriceIn, PriceOut  float64 // USD per 1M tokens
}

// Cost is the run's cost in USD.
func (t Tokens) Cost() float64 {
	return float64(t.Prompt)/1e6*t.PriceIn + float64(t.Completion)/1e6*t.PriceOut
}

// Action-mix labels besides the action names.
const (
	LabelParseError = "parse_error"
	LabelOther      = "other"
)

// ActionLabels is the order of the action-mix histogram.
var ActionLabels = []string{schemas.ActionValidateCode, schemas.ActionRequestInfo, schemas.ActionTerminal,
	schemas.ActionDebug, schemas.ActionAnswer, LabelParseError, LabelOther}

// Build computes the report of rows.
func Build(runID string, rows []parquet.Row, opt Options) Report {
	r := Report{RunID: runID, Episodes: len(rows), Tokens: Tokens{PriceIn: opt.PriceIn, PriceOut: opt.PriceOut}, Baselines: opt.Baselines}
	if opt.Scores != nil {
		r.Verifier = cmp.Or(opt.Verifier, "unnamed verifier")
	}
	outcomes := map[string]int{}
	byDS, byCat := map[string]*Group{}, map[string]*Group{}
	turns := map[int]int{}
	actions := map[string]int{}
	type taskKey struct{ ds, split, id string }
	samples := map[taskKey][]parquet.Row{}
	rels := map[string]*Reliability{}
	relOf := func(ds string) *Reliability {
		if rels[ds] == nil {
			rels[ds] = &Reliability{Dataset: ds}
		}
		return rels[ds]
	}
	abstaining := map[string]bool{}
	for _, ds := range opt.Abstention {
		abstaining[ds] = true
	}
	for _, row := range rows {
		outcomes[row.Outcome]++
		infra := schemas.Outcome(row.Outcome).Excluded()
		correct := schemas.Outcome(row.Outcome).Solved()
		if sc, ok := schemas.Outcome(row.Outcome).Reliability(); ok {
			rel := relOf(row.Dataset)
			rel.Scored++
			switch sc {
			case 1:
				rel.Solved++
			case 0:
				rel.Abstained++
				abstaining[row.Dataset] = true
			default:
				rel.Wrong++
			}
		}
		if row.Outcome == string(schemas.OutcomeAbstainedCorrectly) {
			abstaining[row.Dataset] = true
		}
		for _, g := range []*Group{group(byDS, row.Dataset), group(byCat, row.Dataset+"/"+row.Category)} {
			g.Episodes++
			if !infra {
				g.Scored++
			}
			if correct {
				g.Correct++
			}
		}
		if !infra {
			if _, ok := opt.Scores[row.EpisodeID]; opt.Scores != nil && !ok {
				r.Unscored++
			}
			r.Scored++
			k := taskKey{row.Dataset, row.Split, row.TaskID}
			samples[k] = append(samples[k], row)
		}
		if correct {
			r.Correct++
		}
		turns[int(row.NumTurns)]++
		for _, t := range row.Turns {
			actions[actionLabel(t)]++
		}
		r.Tokens.Prompt += row.PromptTokens
		r.Tokens.Completion += row.CompletionTokens
	}
	for _, o := range schemas.Outcomes {
		r.Outcomes = append(r.Outcomes, Count{string(o), outcomes[string(o)]})
		delete(outcomes, string(o))
	}
	for _, name := range sortedKeys(outcomes) { // outcomes this build does not know
		r.Outcomes = append(r.Outcomes, Count{name, outcomes[name]})
	}
	r.ByDataset, r.ByCategory = groups(byDS), groups(byCat)
	for _, ds := range sortedKeys(rels) {
		if abstaining[ds] {
			r.Reliability = append(r.Reliability, *rels[ds])
		}
	}
	for _, n := range sortedKeys(turns) {
		r.Turns = append(r.Turns, Count{fmt.Sprint(n), turns[n]})
	}
	for _, a := range ActionLabels {
		r.Actions = append(r.Actions, Count{a, actions[a]})
	}

	r.Tasks = len(samples)
	for _, s := range samples {
		slices.SortFunc(s, func(a, b parquet.Row) int {
			return cmp.Or(cmp.Compare(a.SampleIndex, b.SampleIndex), cmp.Compare(a.EpisodeID, b.EpisodeID))
		})
		r.K = max(r.K, len(s))
	}
	for k := 1; k <= r.K; k++ {
		a := AtK{K: k}
		for _, s := range samples {
			if len(s) < k {
				continue
			}
			a.Tasks++
			c := 0
			for _, row := range s {
				if schemas.Outcome(row.Outcome).Solved() {
					c++
				}
			}
			a.Pass += PassAtK(len(s), c, k)
			if schemas.Outcome(Select(s[:k]).Outcome).Solved() {
				a.Oracle++
			}
			if opt.Scores != nil && schemas.Outcome(SelectByScore(s[:k], opt.Scores).Outcome).Solved() {
				a.Best++
			}
		}
		if a.Tasks > 0 {
			a.Pass /= float64(a.Tasks)
			a.Best /= float64(a.Tasks)
			a.Oracle /= float64(a.Tasks)
		}
		r.AtK = append(r.AtK, a)
	}
	return r
}

// PassAtK is the unbiased estimator 1 − C(n−c, k)/C(n, k) of the chance
// that at least one of k samples drawn without replacement from n, of which
// c are correct, is correct. It is computed as a product, so large n does
// not overflow.
func PassAtK(n, c, k int) float64 {
	if k <= 0 || k > n {
		return 0
	}
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// SelectByScore is the Best@k selector: the sample the trajectory verifier
// scored highest (unscored samples last; ties: the lower sample index). s
// must be sorted by sample index and non-empty.
func SelectByScore(s []parquet.Row, scores map[string]float64) parquet.Row {
	best, bestScore, have := s[0], 0.0, false
	for _, row := range s {
		sc, ok := scores[row.EpisodeID]
		if ok && (!have || sc > bestScore) {
			best, bestScore, have = row, sc, true
		}
	}
	return best
}

// Select is the Oracle@k selector (see the package doc): prefer samples that
// ended with an accepted run or an explicit answer, then fewer turns, then
// the lower sample index. s must be sorted by sample index and non-empty.
func Select(s []parquet.Row) parquet.Row {
	best := s[0]
	for _, row := range s[1:] {
		if better(row, best) {
			best = row
		}
	}
	return best
}

func better(a, b parquet.Row) bool {
	ea, eb := explicitEnd(a), explicitEnd(b)
	if ea != eb {
		return ea
	}
	return a.NumTurns < b.NumTurns
}

func explicitEnd(r parquet.Row) bool {
	return r.Termination == string(schemas.EndAccepted) || r.Termination == string(schemas.EndAnswered)
}

func actionLabel(t parquet.Turn) string {
	if t.ParseError != "" {
		return LabelParseError
	}
	if slices.Contains(ActionLabels[:5], t.Action) {
		return t.Action
	}
	return LabelOther
}

func group(m map[string]*Group, name string) *Group {
	g, ok := m[name]
	if !ok {
		g = &Group{Name: name}
		m[name] = g
	}
	return g
}

func groups(m map[string]*Group) []Group {
	out := make([]Group, 0, len(m))
	for _, name := range sortedKeys(m) {
		out = append(out, *m[name])
	}
	return out
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
