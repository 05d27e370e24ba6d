package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/train"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/systemtest/testenv"
)

// TestBuildFromRealStore fills a store by running episodes end to end
// (reference policy, then the fake model with K = 4 and a mix of right and
// wrong answers) and checks every export against the stored episodes.
func TestBuildFromRealStore(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := testenv.Start(t, 6)
	// Disjoint tasks: the llm-worker keys episode state by episode id
	// (task × sample), so a second run over the same task and sample
	// would replay the first run's episode.
	ids := env.TaskIDs()
	ref := env.Run(t, ctx, env.Spec("ref", 1, schemas.PolicySpec{Name: schemas.PolicyReference, Model: "reference-solution"}, ids[3:]))
	seed := int64(0)
	fake := env.Run(t, ctx, env.Spec("fake", 4, schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: testenv.BaseModel,
		BaseURL: env.ModelURL, Logprobs: true, MaxTokens: 8192, Seed: &seed}, ids[:3]))
	scores := append(ref, fake...)
	outcomes := map[string]int{}
	for _, s := range scores {
		outcomes[string(s.Outcome)]++
	}
	// 3 reference successes; per task the fake gives 3 successes and 1 failure.
	if outcomes["correct"] != 3+9 || len(scores) != 15 {
		t.Fatalf("outcomes %v over %d episodes, want 12 correct of 15", outcomes, len(scores))
	}

	st, err := store.Open(ctx, env.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := train.Build(ctx, st, env.Store, train.Filter{}, train.Options{Seed: 7}, out)
	if err != nil {
		t.Fatal(err)
	}
	rows, _, _, err := train.Load(ctx, st, train.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	byEp := map[string]*parquet.Row{}
	for i := range rows {
		byEp[rows[i].EpisodeID] = &rows[i]
	}

	m := res.Manifest
	if m.Load.RowsRead != 15 || m.Counts["episodes"] != 15 || len(m.SourceRuns) != 2 {
		t.Fatalf("manifest counts %+v runs %v", m.Load, m.SourceRuns)
	}
	if m.Counts["sft"] != 12 || len(res.SFT) != 12 {
		t.Fatalf("%d SFT records, want one per success (12)", len(res.SFT))
	}
	for _, r := range res.SFT {
		row := byEp[r.EpisodeID]
		last := r.Messages[len(r.Messages)-1]
		switch {
		case row == nil || row.Outcome != "correct" || row.Reward <= 0:
			t.Fatalf("SFT record %s is not a verified success", r.EpisodeID)
		case last.Role != "assistant" || r.LossMask[len(r.LossMask)-1] != 1:
			t.Fatalf("SFT record %s does not end with an assistant turn carrying loss", r.EpisodeID)
		case last.Content != row.Turns[len(row.Turns)-1].RawText || !row.Turns[len(row.Turns)-1].Accepted:
			t.Fatalf("SFT record %s does not end with the accepted action", r.EpisodeID)
		case r.Messages[0].Role != "system" || r.Messages[1].Role != "user":
			t.Fatalf("SFT record starts %s/%s", r.Messages[0].Role, r.Messages[1].Role)
		}
		for i, msg := range r.Messages {
			if (msg.Role == "assistant") != (r.LossMask[i] == 1) {
				t.Fatalf("loss mask %v does not follow the assistant turns", r.LossMask)
			}
			if i > 1 && msg.Role == "tool" {
				t.Fatalf("observation exported as tool; the model was sent user turns")
			}
		}
	}
	if len(res.Rejected) != 6 {
		t.Fatalf("%d rejection-sampled records, want one per task", len(res.Rejected))
	}
	for _, r := range res.Rejected {
		if r.NumTurns != 1 {
			t.Fatalf("best of K for %s has %d turns; a 1-turn success exists", r.TaskID, r.NumTurns)
		}
	}

	// DPO: one upstream pair per 2-turn success (one per task), cross pairs
	// of each task's failure; never two tasks in one pair.
	if m.Counts["dpo_upstream"] != 3 || m.Counts["dpo_cross"] == 0 {
		t.Fatalf("dpo counts %v", m.Counts)
	}
	for _, p := range res.DPO {
		c, r := byEp[p.ChosenEpisode], byEp[p.RejectedEpisode]
		if train.TaskKey(c) != train.TaskKey(r) || c.TaskID != p.TaskID {
			t.Fatalf("pair mixes tasks: %s vs %s", train.TaskKey(c), train.TaskKey(r))
		}
		if c.Outcome != "correct" || len(p.Chosen) != 1 || len(p.Rejected) != 1 || p.Chosen[0].Role != "assistant" || p.Rejected[0].Role != "assistant" {
			t.Fatalf("bad pair (TRL trains on every message after the prompt: sides must be one assistant turn) %+v", p)
		}
		if p.Kind == train.PairUpstream {
			last := p.Prompt[len(p.Prompt)-1]
			if (last.Role != "user" && last.Role != "tool") || !strings.Contains(p.Rejected[0].Content, "1/0") || p.Chosen[0].Content == p.Rejected[0].Content {
				t.Fatalf("upstream pair: prompt ends %s, rejected %q", last.Role, p.Rejected[0].Content)
			}
		} else if r.Outcome == "correct" {
			t.Fatalf("cross pair rejects a success")
		}
	}

	yes, no := m.Counts["verifier_yes"], m.Counts["verifier_no"]
	if yes != no || yes != 3 {
		t.Fatalf("verifier data %d YES / %d NO, want balanced 3/3 (3 failures)", yes, no)
	}

	// GRPO: groups are task × version; advantages sum to ~0 per group.
	sums := map[string]float64{}
	sizes := map[string]int{}
	for _, g := range res.GRPO {
		sums[g.GroupID] += g.Advantage
		sizes[g.GroupID]++
		if len(g.Completion) != len(g.CompletionMask) || g.Completion[0].Role != "assistant" {
			t.Fatalf("GRPO completion/mask mismatch")
		}
		if strings.HasPrefix(g.RunID, "fake") && (len(g.CompletionTokenIDs[0]) == 0 || len(g.CompletionLogprobs[0]) != len(g.CompletionTokenIDs[0])) {
			t.Fatalf("fake-model sample lacks token ids/logprobs")
		}
	}
	for g, s := range sums {
		if math.Abs(s) > 1e-9 && sizes[g] > 1 {
			t.Fatalf("group %s: advantages sum to %v", g, s)
		}
	}
	// 3 reference groups of one sample, 3 fake-model groups of K = 4.
	if len(sums) != 6 || m.Counts["grpo_zero_variance_groups"] != 0 {
		t.Fatalf("groups %v, zero-variance %d", sizes, m.Counts["grpo_zero_variance_groups"])
	}

	// Files: every export exists in JSONL and Parquet, manifest and card.
	for _, f := range m.Files {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatalf("manifest lists %s: %v", f, err)
		}
	}
	var info map[string]map[string]any
	b, err := os.ReadFile(filepath.Join(out, "dataset_info.json"))
	if err != nil || json.Unmarshal(b, &info) != nil || info["medgym_dpo"]["ranking"] != true {
		t.Fatalf("dataset_info.json: %v %s", err, b)
	}
	back, err := train.ReadJSONL[train.SFTRecord](filepath.Join(out, "sft/sft.jsonl"))
	if err != nil || len(back) != 12 {
		t.Fatalf("sft.jsonl: %d records, %v", len(back), err)
	}
	if !strings.Contains(res.DataCard, "| medcalcbench | 6 | 15 | 80.0% |") || !strings.Contains(res.DataCard, "## Conversation length (tokens)") {
		t.Fatalf("data card:\n%s", res.DataCard)
	}

	// Same context at sampling and training: every assistant turn of every
	// SFT, GRPO and DPO record follows a context the llm-worker really sent
	// the model (captured at the fake server), message for message and
	// rendered through a chat template.
	sent := map[string]bool{}
	for _, msgs := range env.Sent() {
		sent[chatML(toMessages(msgs))] = true
	}
	checked := 0
	checkContexts := func(kind, run string, msgs []train.Message) {
		t.Helper()
		if run != "fake" { // the reference policy sends nothing to a model
			return
		}
		checked++
		n := 0
		for i, m := range msgs {
			if m.Role != "assistant" {
				continue
			}
			n++
			if !sent[chatML(msgs[:i])] {
				t.Fatalf("%s record: the context of assistant turn %d was never sent to the model:\n%s", kind, i, chatML(msgs[:i]))
			}
		}
		if n == 0 {
			t.Fatalf("%s record without an assistant turn", kind)
		}
	}
	for _, r := range res.SFT {
		checkContexts("SFT", r.RunID, r.Messages)
	}
	for _, g := range res.GRPO {
		if !g.SameContext {
			t.Fatalf("GRPO record %s rendered unlike it was sampled", g.EpisodeID)
		}
		checkContexts("GRPO", g.RunID, append(slices.Clone(g.Prompt), g.Completion...))
	}
	for _, p := range res.DPO {
		run := byEp[p.ChosenEpisode].RunID
		checkContexts("DPO chosen", run, append(slices.Clone(p.Prompt), p.Chosen...))
		checkContexts("DPO rejected", run, append(slices.Clone(p.Prompt), p.Rejected...))
	}
	if checked < 9+12 {
		t.Fatalf("only %d fake-model records checked against what the model was sent", checked)
	}
	// Negative control: observations renamed to tool no longer match, and
	// their records say so and carry no sampler logprobs.
	tool, err := train.Build(ctx, st, env.Store, train.Filter{}, train.Options{Seed: 7, ObsRole: "tool"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range tool.GRPO {
		full := append(slices.Clone(g.Prompt), g.Completion...)
		if len(g.Completion) > 1 && (g.SameContext || len(g.CompletionLogprobs) != 0 || sent[chatML(full[:len(full)-1])]) {
			t.Fatalf("GRPO record %s with tool observations claims the sampled context", g.EpisodeID)
		}
	}
}

// chatML renders messages as the ChatML template does (Qwen's), with no
// generation prompt: equal renderings mean equal model input.
func chatML(msgs []train.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", m.Role, m.Content)
	}
	return b.String()
}

func toMessages(ms []schemas.ChatMessage) []train.Message {
	out := make([]train.Message, len(ms))
	for i, m := range ms {
		out[i] = train.Message{Role: m.Role, Content: m.Content}
	}
	return out
}
