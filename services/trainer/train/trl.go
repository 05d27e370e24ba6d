package train

import "slices"

// TRLRecord is one conversational prompt/completion example in the layout
// TRL's SFTTrainer trains on: Prompt is the conversation before one
// assistant turn that carries loss, Completion that turn alone. TRL puts
// loss on the completion's tokens only (completion_only_loss, its default
// for prompt/completion data), so a turn a loss mask leaves out (a format
// error) is only ever context in a later record's prompt, and observations
// never carry loss. TRL ignores a per-message loss_mask column: a
// `messages` record trains every token of it (or, with
// assistant_only_loss, every assistant turn, masked ones too).
type TRLRecord struct {
	Prompt     []Message `json:"prompt"`
	Completion []Message `json:"completion"`
	// Turn is the completion's index in the source record's messages.
	Turn      int    `json:"turn"`
	RunID     string `json:"run_id"`
	EpisodeID string `json:"episode_id"`
	TaskID    string `json:"task_id"`
	Dataset   string `json:"dataset"`
	Split     string `json:"split"`
}

// trlTurns splits a conversation with a per-message loss mask into one
// TRLRecord per assistant message whose mask is 1; meta gives the ids.
func trlTurns(msgs []Message, mask []int8, meta TRLRecord) []TRLRecord {
	var out []TRLRecord
	for i, m := range msgs {
		if m.Role != RoleAssistant || i >= len(mask) || mask[i] != 1 {
			continue
		}
		r := meta
		r.Prompt, r.Completion, r.Turn = slices.Clone(msgs[:i]), []Message{m}, i
		out = append(out, r)
	}
	return out
}

// TRLSFT gives the TRL prompt/completion records of SFT (or
// rejection-sampling) records: one per assistant turn with loss, in order.
func TRLSFT(recs []SFTRecord) []TRLRecord {
	var out []TRLRecord
	for _, r := range recs {
		out = append(out, trlTurns(r.Messages, r.LossMask, TRLRecord{RunID: r.RunID, EpisodeID: r.EpisodeID,
			TaskID: r.TaskID, Dataset: r.Dataset, Split: r.Split})...)
	}
	return out
}

// TRLVerifier gives the TRL prompt/completion records of verifier records:
// the rendered trajectory as the prompt, the YES/NO label as the
// completion.
func TRLVerifier(recs []VerifierRecord) []TRLRecord {
	var out []TRLRecord
	for _, r := range recs {
		out = append(out, trlTurns(r.Messages, r.LossMask, TRLRecord{RunID: r.RunID, EpisodeID: r.EpisodeID,
			TaskID: r.TaskID, Dataset: r.Dataset})...)
	}
	return out
}
