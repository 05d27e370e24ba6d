package train

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas/parquet"
)

// SFTRecord is one successful conversation, ending with the assistant turn
// the verifier accepted. LossMask has one entry per message: 1 for
// assistant turns (the only ones that carry loss), 0 otherwise.
type SFTRecord struct {
	Messages  []Message `json:"messages"`
	LossMask  []int8    `json:"loss_mask"`
	RunID     string    `json:"run_id"`
	EpisodeID string    `json:"episode_id"`
	TaskID    string    `json:"task_id"`
	Dataset   string    `json:"dataset"`
	Split     string    `json:"split"`
	Reward    float64   `json:"reward"`
	NumTurns  int       `json:"num_turns"`
}

// Format-error policies of SFT exports: what to do with an assistant turn
// that failed to parse (the llm-worker answered it with a format error).
const (
	// FormatMask keeps the turn as context but gives it no loss (default).
	FormatMask = "mask"
	// FormatDrop leaves out episodes that have such a turn.
	FormatDrop = "drop"
	// FormatKeep trains on them like any assistant turn.
	FormatKeep = "keep"
)

// SFTStats counts what the format-error policy did.
type SFTStats struct {
	FormatErrorTurnsMasked  int `json:"format_error_turns_masked"`
	FormatErrorEpisodesDrop int `json:"format_error_episodes_dropped"`
}

// SFT returns one record per successful episode, in input order. Turns
// that failed to parse carry no loss (formatErrors "mask", the default),
// or drop their episode ("drop"), or are kept ("keep").
func SFT(eps []*Episode, formatErrors string) ([]SFTRecord, SFTStats) {
	var out []SFTRecord
	var st SFTStats
	for _, e := range eps {
		if !e.Success() || len(e.Steps) == 0 {
			continue
		}
		if rec, ok := sftRecord(e, formatErrors, &st); ok {
			out = append(out, rec)
		}
	}
	return out, st
}

func sftRecord(e *Episode, formatErrors string, st *SFTStats) (SFTRecord, bool) {
	n := e.FinalStep() + 1
	bad := 0
	for k := 0; k < n; k++ {
		if e.FormatError(k) {
			bad++
		}
	}
	if bad > 0 && formatErrors == FormatDrop {
		st.FormatErrorEpisodesDrop++
		return SFTRecord{}, false
	}
	mask := formatErrors != FormatKeep
	if mask {
		st.FormatErrorTurnsMasked += bad
	}
	msgs, lm := e.conversation(n, false, mask)
	r := e.Row
	return SFTRecord{Messages: msgs, LossMask: lm, RunID: r.RunID, EpisodeID: r.EpisodeID, TaskID: r.TaskID,
		Dataset: r.Dataset, Split: r.Split, Reward: r.Reward, NumTurns: n}, true
}

// byTask groups episodes by TaskKey, keeping the order of first appearance.
func byTask(eps []*Episode) (keys []string, groups map[string][]*Episode) {
	groups = map[string][]*Episode{}
	for _, e := range eps {
		k := e.TaskKey()
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], e)
	}
	return keys, groups
}

// better orders episodes best first: success, then fewer turns, then fewer
// tokens, then episode id (for a stable result).
func better(a, b *Episode) int {
	if a.Success() != b.Success() {
		if a.Success() {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(len(a.Steps), len(b.Steps)), cmp.Compare(a.Tokens(), b.Tokens()),
		cmp.Compare(a.Row.EpisodeID, b.Row.EpisodeID))
}

// RejectionSample keeps the best of the K samples of each task (success
// first, then fewer turns, then fewer tokens) and returns it as an SFT
// record (format errors handled as in SFT); tasks whose best sample failed
// yield nothing (rejected).
func RejectionSample(eps []*Episode, formatErrors string) (kept []SFTRecord, rejectedTasks int) {
	var st SFTStats
	keys, groups := byTask(eps)
	for _, k := range keys {
		g := slices.Clone(groups[k])
		slices.SortStableFunc(g, better)
		if !g[0].Success() || len(g[0].Steps) == 0 {
			rejectedTasks++
			continue
		}
		if rec, ok := sftRecord(g[0], formatErrors, &st); ok {
			kept = append(kept, rec)
		}
	}
	return kept, rejectedTasks
}

// DPO pair kinds.
const (
	PairUpstream = "upstream" // within one successful episode: fixed attempt vs failed attempt
	PairCross    = "cross"    // successful vs failed episode of the same task
)

// DPORecord is a preference pair in TRL's explicit-prompt layout. Prompt
// ends with a user or tool message; Chosen and Rejected are single
// assistant messages. TRL's DPOTrainer puts loss on every token after the
// prompt, so a side never holds an observation: cross-episode pairs are cut
// at the first assistant turn where the two episodes differ, with the
// shared conversation before it as the prompt.
type DPORecord struct {
	Prompt          []Message `json:"prompt"`
	Chosen          []Message `json:"chosen"`
	Rejected        []Message `json:"rejected"`
	Kind            string    `json:"kind"`
	TaskID          string    `json:"task_id"`
	Dataset         string    `json:"dataset"`
	Split           string    `json:"split"`
	ChosenEpisode   string    `json:"chosen_episode"`
	RejectedEpisode string    `json:"rejected_episode"`
	ChosenReward    float64   `json:"chosen_reward"`
	RejectedReward  float64   `json:"rejected_reward"`
}

// Options tune the builders.
type Options struct {
	// ObsRole is the role of observation messages: "tool" (default) or "user".
	ObsRole string
	// MaxCrossPairs bounds cross-episode pairs per task (0: 4).
	MaxCrossPairs int
	// NoCrossPairs turns cross-episode pairs off.
	NoCrossPairs bool
	// Seed drives the balancing of verifier data.
	Seed int64
	// SFTFormatErrors is FormatMask (default), FormatDrop or FormatKeep.
	SFTFormatErrors string
	GRPO            GRPOOptions
}

// DPO builds preference pairs. Upstream recipe: in a successful episode,
// every failed attempt before the accepted turn gives a pair whose prompt is
// the shared context up to that attempt, chosen the action that later
// succeeded and rejected the failed attempt. Cross-episode pairs: the best
// successes of a task against its worst failures, sharing the initial
// prompt. Pairs never mix tasks: both sides come from one task group.
func DPO(eps []*Episode, o Options) []DPORecord {
	maxCross := o.MaxCrossPairs
	if maxCross <= 0 {
		maxCross = 4
	}
	var out []DPORecord
	keys, groups := byTask(eps)
	for _, k := range keys {
		g := groups[k]
		for _, e := range g {
			if !e.Success() || !e.Aligned {
				continue
			}
			final := e.FinalStep()
			chosen := e.Steps[final].Action
			for j := 0; j < final; j++ {
				if !failedAttempt(e.Row.Turns[j]) || e.Steps[j].Action.Content == chosen.Content {
					continue
				}
				prompt, _ := e.Conversation(j, true)
				out = append(out, pair(PairUpstream, e, e, prompt, []Message{chosen}, []Message{e.Steps[j].Action}))
			}
		}
		if o.NoCrossPairs {
			continue
		}
		var wins, losses []*Episode
		for _, e := range g {
			if len(e.Steps) == 0 {
				continue
			}
			if e.Success() {
				wins = append(wins, e)
			} else {
				losses = append(losses, e)
			}
		}
		slices.SortStableFunc(wins, better)
		slices.SortStableFunc(losses, func(a, b *Episode) int { return -better(a, b) }) // worst first
		n := 0
		seen := map[string]bool{}
		for _, w := range wins {
			for _, l := range losses {
				if n == maxCross || w.Row.Reward <= l.Row.Reward {
					continue
				}
				cw, _ := w.Conversation(w.FinalStep()+1, false)
				cl, _ := l.Conversation(len(l.Steps), false)
				at, ok := firstDivergentAction(cw, cl)
				if !ok {
					continue
				}
				key := fmt.Sprint(at, "\x00", cw[at].Content, "\x00", cl[at].Content)
				if seen[key] { // the same fork of the same shared context
					continue
				}
				seen[key] = true
				out = append(out, pair(PairCross, w, l, cw[:at], []Message{cw[at]}, []Message{cl[at]}))
				n++
			}
		}
	}
	return out
}

// firstDivergentAction finds the first message where two conversations
// differ and reports it when both have an assistant message there (the
// contexts before it are identical). A fork at an observation (the same
// action, different results) or a conversation that is a prefix of the
// other gives no pair.
func firstDivergentAction(a, b []Message) (int, bool) {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		return i, a[i].Role == RoleAssistant && b[i].Role == RoleAssistant
	}
	return 0, false
}

func pair(kind string, w, l *Episode, prompt, chosen, rejected []Message) DPORecord {
	return DPORecord{Prompt: slices.Clone(prompt), Chosen: chosen, Rejected: rejected, Kind: kind,
		TaskID: w.Row.TaskID, Dataset: w.Row.Dataset, Split: w.Row.Split,
		ChosenEpisode: w.Row.EpisodeID, RejectedEpisode: l.Row.EpisodeID,
		ChosenReward: w.Row.Reward, RejectedReward: l.Row.Reward}
}

// VerifierRecord is one trajectory labelled YES (solved) or NO, as a
// two-message chat: the rendered trajectory and the question as the user
// turn, the label as the assistant turn (the ORM of upstream §6.2 reads
// the YES/NO logits of that answer).
type VerifierRecord struct {
	Messages []Message `json:"messages"`
	// LossMask trains the label only (the same SFT step trains the
	// verifier).
	LossMask  []int8 `json:"loss_mask"`
	RunID     string `json:"run_id"`
	Label     string `json:"label"`
	Passed    bool   `json:"passed"`
	EpisodeID string `json:"episode_id"`
	TaskID    string `json:"task_id"`
	Dataset   string `json:"dataset"`
}

// VerifierQuestion ends the rendered trajectory of a verifier record.
const VerifierQuestion = "Did the agent solve the task correctly? Answer YES or NO."

// Verifier labels whole trajectories and balances the classes by dropping
// a seeded, deterministic choice of the majority class.
func Verifier(eps []*Episode, o Options) []VerifierRecord {
	var yes, no []VerifierRecord
	for _, e := range eps {
		if len(e.Steps) == 0 {
			continue
		}
		rec := VerifierInput(e)
		if e.Success() {
			yes = append(yes, rec)
		} else {
			no = append(no, rec)
		}
	}
	n := min(len(yes), len(no))
	pick := func(rs []VerifierRecord) []VerifierRecord {
		slices.SortStableFunc(rs, func(a, b VerifierRecord) int {
			return cmp.Compare(seededHash(o.Seed, a.EpisodeID), seededHash(o.Seed, b.EpisodeID))
		})
		return rs[:n]
	}
	out := append(pick(yes), pick(no)...)
	slices.SortStableFunc(out, func(a, b VerifierRecord) int {
		return cmp.Compare(seededHash(o.Seed+1, a.EpisodeID), seededHash(o.Seed+1, b.EpisodeID))
	})
	return out
}

// VerifierInput renders an episode for the trajectory verifier: the whole
// trajectory and VerifierQuestion as one user turn, then the label
// (YES: solved) as the assistant turn. Scoring reads the user turn only.
func VerifierInput(e *Episode) VerifierRecord {
	var b strings.Builder
	msgs, _ := e.Conversation(len(e.Steps), true)
	for _, m := range msgs {
		fmt.Fprintf(&b, "[%s]\n%s\n\n", m.Role, m.Content)
	}
	b.WriteString(VerifierQuestion)
	label := "NO"
	if e.Success() {
		label = "YES"
	}
	return VerifierRecord{Messages: []Message{{RoleUser, b.String()}, {RoleAssistant, label}}, LossMask: []int8{0, 1},
		RunID: e.Row.RunID, Label: label, Passed: e.Success(), EpisodeID: e.Row.EpisodeID, TaskID: e.Row.TaskID,
		Dataset: e.Row.Dataset}
}

func seededHash(seed int64, s string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, s)
	return h.Sum64()
}

// GRPOOptions configure advantages.
type GRPOOptions struct {
	// Eps is added to the std (0: 1e-6, verl's value; TRL uses 1e-4).
	Eps float64
	// Scale is "group" (default: (r − mean)/(std + ε)) or "none" (Dr. GRPO:
	// r − mean).
	Scale string
	// DropZeroVariance drops groups whose rewards are all equal (their
	// advantages are all zero).
	DropZeroVariance bool
	// Weight gives a sample's loss weight (nil: 1); the online loop uses
	// it to down-weight stale samples.
	Weight func(*parquet.Row) float64
	// FormatWeight adds FormatWeight × FormatScore to the verifier's reward
	// (correctness + format reward, upstream §6.2); 0 leaves the reward as
	// stored.
	FormatWeight float64
}

// GRPORecord is one sample of a GRPO group (GroupID).
// Completion holds the assistant turns and the observations between them;
// CompletionMask marks the assistant turns (1), which alone carry loss.
// CompletionTokenIDs and CompletionLogprobs are the sampler's per-turn
// token ids and logprobs where the endpoint recorded them (empty lists
// otherwise), in the order of the assistant messages; they are left empty
// when the rendering differs from what the model was sent (SameContext
// false), so they are never taken for π_old of another context.
type GRPORecord struct {
	GroupID            string      `json:"group_id"`
	TaskID             string      `json:"task_id"`
	Dataset            string      `json:"dataset"`
	Split              string      `json:"split"`
	PolicyVersion      int32       `json:"policy_version"`
	SampleIndex        int32       `json:"sample_index"`
	RunID              string      `json:"run_id"`
	EpisodeID          string      `json:"episode_id"`
	Outcome            string      `json:"outcome"`
	Reward             float64     `json:"reward"`
	Advantage          float64     `json:"advantage"`
	Weight             float64     `json:"weight"`
	Prompt             []Message   `json:"prompt"`
	Completion         []Message   `json:"completion"`
	CompletionMask     []int8      `json:"completion_mask"`
	CompletionTokenIDs [][]int32   `json:"completion_token_ids"`
	CompletionLogprobs [][]float32 `json:"completion_logprobs"`
	// SameContext: the messages are exactly those the model was sent.
	SameContext bool `json:"same_context"`
	// CorrectReward is the verifier's reward; Reward adds the format part.
	CorrectReward float64 `json:"correct_reward"`
}

// GRPOStats counts what GRPO did.
type GRPOStats struct {
	Groups              int `json:"groups"`
	Samples             int `json:"samples"`
	ZeroVariance        int `json:"zero_variance_groups"`
	DroppedZeroVariance int `json:"dropped_zero_variance_groups"`
}

// GroupID names a GRPO group: everything the samples of one group share.
// The run (one sampling batch: its turn limits and options), the model (or
// adapter) and policy version that sampled it, the temperature and the task
// (dataset/split/id). Two runs over one task never share a group, whatever
// else they have in common.
func GroupID(r *parquet.Row) string {
	temp := "default"
	if r.Temperature != nil {
		temp = strconv.FormatFloat(*r.Temperature, 'g', -1, 64)
	}
	return fmt.Sprintf("%s|%s|v%d|T=%s|%s", r.RunID, r.Model, r.PolicyVersion, temp, TaskKey(r))
}

// FormatScore is the format part of the online reward: the share of the
// episode's policy turns that parsed as an action (the paper rewards output
// that holds code blocks; here every action is a JSON object, so a turn
// that parses is the well-formed one). An episode without turns scores 0.
func FormatScore(r *parquet.Row) float64 {
	if len(r.Turns) == 0 {
		return 0
	}
	ok := 0
	for _, t := range r.Turns {
		if t.ParseError == "" {
			ok++
		}
	}
	return float64(ok) / float64(len(r.Turns))
}

// Advantages returns (r − mean)/(std + eps) with the Bessel-corrected std
// (TRL, verl), or r − mean when scale is "none". A group of one gets mean
// 0 and std 1, as in verl.
func Advantages(rewards []float64, eps float64, scale string) []float64 {
	n := float64(len(rewards))
	mean, std := 0.0, 1.0
	if len(rewards) > 1 {
		mean = 0
		for _, r := range rewards {
			mean += r
		}
		mean /= n
		var ss float64
		for _, r := range rewards {
			ss += (r - mean) * (r - mean)
		}
		std = math.Sqrt(ss / (n - 1))
	}
	out := make([]float64, len(rewards))
	for i, r := range rewards {
		if scale == "none" {
			out[i] = r - mean
		} else {
			out[i] = (r - mean) / (std + eps)
		}
	}
	return out
}

// GRPO groups episodes by GroupID and computes advantages.
func GRPO(eps []*Episode, o GRPOOptions) ([]GRPORecord, GRPOStats) {
	if o.Eps == 0 {
		o.Eps = 1e-6
	}
	var st GRPOStats
	var out []GRPORecord
	groups := map[string][]*Episode{}
	var keys []string
	for _, e := range eps {
		if len(e.Steps) == 0 {
			continue
		}
		k := GroupID(e.Row)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], e)
	}
	for _, k := range keys {
		g := groups[k]
		slices.SortStableFunc(g, func(a, b *Episode) int { return cmp.Compare(a.Row.SampleIndex, b.Row.SampleIndex) })
		rewards := make([]float64, len(g))
		zeroVar := true
		for i, e := range g {
			rewards[i] = e.Row.Reward + o.FormatWeight*FormatScore(e.Row)
			zeroVar = zeroVar && rewards[i] == rewards[0]
		}
		if zeroVar && len(g) > 1 {
			st.ZeroVariance++
			if o.DropZeroVariance {
				st.DroppedZeroVariance++
				continue
			}
		}
		adv := Advantages(rewards, o.Eps, o.Scale)
		st.Groups++
		for i, e := range g {
			msgs, mask := e.Conversation(len(e.Steps), false)
			r := e.Row
			w := 1.0
			if o.Weight != nil {
				w = o.Weight(r)
			}
			rec := GRPORecord{GroupID: k, TaskID: r.TaskID, Dataset: r.Dataset, Split: r.Split,
				PolicyVersion: r.PolicyVersion, SampleIndex: r.SampleIndex, RunID: r.RunID, EpisodeID: r.EpisodeID,
				Outcome: r.Outcome, Reward: rewards[i], CorrectReward: r.Reward, Advantage: adv[i], Weight: w,
				Prompt: slices.Clone(msgs[:len(e.Prompt)]), Completion: msgs[len(e.Prompt):], CompletionMask: mask[len(e.Prompt):],
				SameContext: e.SameContext, CompletionTokenIDs: [][]int32{}, CompletionLogprobs: [][]float32{}}
			for _, t := range r.Turns {
				if !e.SameContext {
					break
				}
				rec.CompletionTokenIDs = append(rec.CompletionTokenIDs, orEmpty(t.CompletionTokenIDs))
				rec.CompletionLogprobs = append(rec.CompletionLogprobs, orEmpty(t.CompletionLogprobs))
			}
			out = append(out, rec)
			st.Samples++
		}
	}
	return out, st
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
