package train_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/train"
)

// episode builds a stored row: a system prompt and the task, then one
// assistant message per action, each but the last followed by its
// observation (sent as role "user", as the llm-worker does). A
// "!"-prefixed action failed to parse; the last action is accepted when
// the outcome is correct.
func episode(run, model string, temp float64, task string, sample int32, outcome string, actions ...string) parquet.Row {
	r := parquet.Row{RunID: run, SchemaVersion: parquet.SchemaVersion, EpisodeID: run + "/" + task + "/" + string(rune('0'+sample)), TaskID: task,
		Dataset: "medcalcbench", Split: "train", SampleIndex: sample, Model: model, Temperature: &temp, Outcome: outcome,
		Messages: []parquet.Message{{Role: "system", Content: "You are an agent."}, {Role: "user", Content: "Task " + task}}}
	if outcome == "correct" {
		r.Reward = 1
	}
	for i, a := range actions {
		t := parquet.Turn{Index: int32(i), RawText: a, Action: "validate_code", ExecStatus: "ok",
			CompletionTokenIDs: []int32{1, 2}, CompletionLogprobs: []float32{-0.1, -0.2}}
		if strings.HasPrefix(a, "!") {
			t.Action, t.ParseError, t.ExecStatus = "", "not JSON", ""
		}
		t.Accepted = i == len(actions)-1 && outcome == "correct"
		r.Messages = append(r.Messages, parquet.Message{Role: "assistant", Content: a})
		if i < len(actions)-1 {
			obs := "output of " + a
			r.Messages = append(r.Messages, parquet.Message{Role: "user", Content: obs})
			t.Observation = obs
		}
		r.Turns = append(r.Turns, t)
	}
	r.NumTurns = int32(len(r.Turns))
	return r
}

func episodes(rows []parquet.Row, obsRole string) []*train.Episode {
	eps := make([]*train.Episode, len(rows))
	for i := range rows {
		eps[i] = train.NewEpisode(&rows[i], obsRole)
	}
	return eps
}

// TestGRPOGroupsNeverMergeRuns: one task sampled by two runs (different
// models, temperatures), and by a third run with the same model and
// temperature as the first (a different turn limit, say): three groups,
// each from one run, advantages summing to ~0 in each.
func TestGRPOGroupsNeverMergeRuns(t *testing.T) {
	var rows []parquet.Row
	for _, run := range []struct {
		id, model string
		temp      float64
	}{{"a", "m1", 0.6}, {"b", "m2", 1.0}, {"c", "m1", 0.6}} {
		for k, out := range []string{"correct", "incorrect", "correct", "incorrect"} {
			rows = append(rows, episode(run.id, run.model, run.temp, "t1", int32(k), out, "x"+run.id))
		}
	}
	// The positive control: every row shares the task key (the old group).
	for i := range rows {
		if train.TaskKey(&rows[i]) != train.TaskKey(&rows[0]) {
			t.Fatal("rows must share a task for this test to mean anything")
		}
	}
	recs, st := train.GRPO(episodes(rows, ""), train.GRPOOptions{})
	if st.Groups != 3 || len(recs) != 12 {
		t.Fatalf("%d groups of %d samples, want 3 of 12", st.Groups, len(recs))
	}
	runs, sums := map[string]map[string]bool{}, map[string]float64{}
	for _, r := range recs {
		if runs[r.GroupID] == nil {
			runs[r.GroupID] = map[string]bool{}
		}
		runs[r.GroupID][r.RunID] = true
		sums[r.GroupID] += r.Advantage
	}
	for g, rs := range runs {
		if len(rs) != 1 || math.Abs(sums[g]) > 1e-9 {
			t.Fatalf("group %s holds runs %v, advantages sum %v", g, rs, sums[g])
		}
	}
}

// TestGRPOFormatReward: correctness + weight × the share of turns that
// parsed; with the weight 0 the reward is the verifier's.
func TestGRPOFormatReward(t *testing.T) {
	rows := []parquet.Row{
		episode("a", "m", 0.6, "t1", 0, "incorrect", "!junk", "code"),
		episode("a", "m", 0.6, "t1", 1, "incorrect", "code", "code2"),
	}
	recs, _ := train.GRPO(episodes(rows, ""), train.GRPOOptions{FormatWeight: 0.2})
	if recs[0].Reward != 0.1 || recs[1].Reward != 0.2 || recs[0].CorrectReward != 0 || recs[0].Advantage >= recs[1].Advantage {
		t.Fatalf("rewards %v/%v advantages %v/%v, want 0.1/0.2 and the well-formed sample ahead",
			recs[0].Reward, recs[1].Reward, recs[0].Advantage, recs[1].Advantage)
	}
	plain, _ := train.GRPO(episodes(rows, ""), train.GRPOOptions{})
	if plain[0].Reward != 0 || plain[1].Reward != 0 {
		t.Fatalf("without a format weight rewards are %v/%v, want the verifier's 0", plain[0].Reward, plain[1].Reward)
	}
}

// TestSFTFormatErrors: a turn that failed to parse stays in the context
// without loss (default), drops its episode, or is kept; counts follow.
func TestSFTFormatErrors(t *testing.T) {
	rows := []parquet.Row{episode("a", "m", 0.6, "t1", 0, "correct", "!junk", "code")}
	eps := episodes(rows, "")
	recs, st := train.SFT(eps, train.FormatMask)
	if len(recs) != 1 || st.FormatErrorTurnsMasked != 1 {
		t.Fatalf("mask: %d records, %d masked", len(recs), st.FormatErrorTurnsMasked)
	}
	r := recs[0]
	if r.Messages[2].Content != "!junk" || r.LossMask[2] != 0 || r.Messages[4].Content != "code" || r.LossMask[4] != 1 {
		t.Fatalf("mask: messages %v mask %v", r.Messages, r.LossMask)
	}
	if recs, st := train.SFT(eps, train.FormatDrop); len(recs) != 0 || st.FormatErrorEpisodesDrop != 1 {
		t.Fatalf("drop: %d records, %d dropped", len(recs), st.FormatErrorEpisodesDrop)
	}
	if recs, _ := train.SFT(eps, train.FormatKeep); recs[0].LossMask[2] != 1 {
		t.Fatalf("keep: mask %v", recs[0].LossMask)
	}
}

// TestDPOCrossPairsAreSafeForTRL: TRL's DPOTrainer trains on every token
// after the prompt, so a cross pair is cut at the first assistant turn
// where the episodes differ; its prompt is the shared context, and each
// side is one assistant message. Episodes that fork at an observation give
// no pair.
func TestDPOCrossPairsAreSafeForTRL(t *testing.T) {
	rows := []parquet.Row{
		episode("a", "m", 0.6, "t1", 0, "correct", "look", "solve"),
		episode("a", "m", 0.6, "t1", 1, "incorrect", "look", "guess", "guess again"),
		episode("a", "m", 0.6, "t1", 2, "incorrect", "wander", "guess"),
	}
	forked := episode("a", "m", 0.6, "t1", 3, "incorrect", "look", "solve")
	forked.Messages[3].Content = "a different output" // same action, other result
	rows = append(rows, forked)
	pairs := train.DPO(episodes(rows, ""), train.Options{})
	var cross []train.DPORecord
	for _, p := range pairs {
		if p.Kind == train.PairCross {
			cross = append(cross, p)
		}
	}
	if len(cross) != 2 {
		t.Fatalf("%d cross pairs, want 2 (the observation fork gives none): %+v", len(cross), cross)
	}
	for _, p := range cross {
		if len(p.Chosen) != 1 || len(p.Rejected) != 1 || p.Chosen[0].Role != "assistant" || p.Rejected[0].Role != "assistant" {
			t.Fatalf("pair sides are not single assistant turns: %+v", p)
		}
		w := rows[0].Messages
		if len(p.Prompt) > len(w) || !slices.EqualFunc(p.Prompt, w[:len(p.Prompt)], func(a train.Message, b parquet.Message) bool {
			return a.Role == b.Role && a.Content == b.Content
		}) {
			t.Fatalf("prompt is not the winner's own context: %+v", p.Prompt)
		}
		switch p.Rejected[0].Content {
		case "guess": // forked after the shared "look" turn and its observation
			if len(p.Prompt) != 4 || p.Chosen[0].Content != "solve" {
				t.Fatalf("pair %+v", p)
			}
		case "wander":
			if len(p.Prompt) != 2 || p.Chosen[0].Content != "look" {
				t.Fatalf("pair %+v", p)
			}
		default:
			t.Fatalf("unexpected pair %+v", p)
		}
	}
}

// TestObservationRoleAsSampled: by default observations keep the role
// they were sent with (rows older than schema 5 read as user); renaming
// them marks the records and drops the sampler's logprobs, which belong
// to the other context.
func TestObservationRoleAsSampled(t *testing.T) {
	rows := []parquet.Row{
		episode("a", "m", 0.6, "t1", 0, "correct", "look", "solve"),
		episode("a", "m", 0.6, "t1", 1, "incorrect", "look", "guess"),
	}
	recs, _ := train.GRPO(episodes(rows, ""), train.GRPOOptions{})
	for _, r := range recs {
		if !r.SameContext || r.Completion[1].Role != "user" || len(r.CompletionLogprobs) != 2 {
			t.Fatalf("sampled rendering: %+v", r)
		}
	}
	recs, _ = train.GRPO(episodes(rows, "tool"), train.GRPOOptions{})
	for _, r := range recs {
		if r.SameContext || r.Completion[1].Role != "tool" || len(r.CompletionLogprobs) != 0 {
			t.Fatalf("tool rendering: %+v", r)
		}
	}
	rows[0].ObservationRole, rows[1].ObservationRole = "tool", "tool"
	rows[0].Messages[3].Role, rows[1].Messages[3].Role = "tool", "tool"
	if recs, _ := train.GRPO(episodes(rows, ""), train.GRPOOptions{}); !recs[0].SameContext || recs[0].Completion[1].Role != "tool" {
		t.Fatalf("a tool-sampled row must render as tool: %+v", recs[0])
	}
}

// TestDataCardLengths: the card reports the token-length distribution and
// the manifest carries it.
func TestDataCardLengths(t *testing.T) {
	var rows []parquet.Row
	for k := range 10 {
		r := episode("a", "m", 0.6, "t1", int32(k), "correct", "solve")
		r.Turns[0].PromptTokens, r.Turns[0].CompletionTokens = int32(1000*(k+1)), 100
		rows = append(rows, r)
	}
	res, err := train.Build(context.Background(), memSource{"r1": rows}, "mem", train.Filter{},
		train.Options{GRPO: train.GRPOOptions{FormatWeight: 0.5}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := res.Manifest.Lengths
	if l.N != 10 || l.Max != 10100 || l.P50 != 6100 || l.Fit[4096] != 3 || l.Fit[16384] != 10 {
		t.Fatalf("lengths %+v", l)
	}
	if res.Manifest.GRPO.FormatWeight != 0.5 || res.GRPO[0].Reward != 1.5 || res.GRPO[0].CorrectReward != 1 {
		t.Fatalf("format weight %v: reward %v (correct %v), want 1.5 (1)", res.Manifest.GRPO.FormatWeight, res.GRPO[0].Reward, res.GRPO[0].CorrectReward)
	}
	if !strings.Contains(res.DataCard, "| 10 | 6100 |") {
		t.Fatalf("data card:\n%s", res.DataCard)
	}
}
