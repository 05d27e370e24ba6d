package parquet

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// Bounds of a valid row (Row.Validate).
const (
	// MaxAbsReward bounds |reward|: the verifier's rewards are 1, a graded
	// accuracy, 0 or minus a wrong-answer penalty, plus a format reward
	// (either may be large: RS(N) penalises a wrong answer by N, the size
	// of the test set; a format reward may be negative, so a correct
	// episode's reward may be 0 or below).
	MaxAbsReward = 1_000_000
	// MaxTextBytes bounds one text cell: a message, or one field of a turn
	// (raw text, reasoning, parameters, observation, stdout, stderr, or
	// one output file of files_json).
	// Stored outputs are capped at schemas.MaxStoredOutputBytes; a model
	// reply is a few thousand tokens.
	MaxTextBytes = 8 << 20
)

// laterColumns are the top-level columns added after version 1, with the
// version that added them: older files lack them and read back empty.
var laterColumns = map[string]int{"agent_tree_hash": 3, "verifier_tree_hash": 3, "observation_role": 5, "label_set": 7}

// checkColumns fails when a file's schema lacks a column every version has.
// Before it, a file without "reward" read back as reward 0.
func checkColumns(sch *arrow.Schema) error {
	for _, f := range schema.Fields() {
		if _, later := laterColumns[f.Name]; later {
			continue
		}
		if len(sch.FieldIndices(f.Name)) == 0 {
			return fmt.Errorf("the file has no column %s (every trajectory schema version has it)", f.Name)
		}
	}
	return nil
}

// FieldError is a row value that Validate refuses: the episode, the column
// (turns[3].stdout for a turn's field) and what is wrong.
type FieldError struct {
	Episode, Column, Problem string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("episode %q: column %s: %s", e.Episode, e.Column, e.Problem)
}

// Validate checks the values a trainer relies on: identity, a schema
// version this reader knows, a finite reward within ±MaxAbsReward, token counts and durations that are not
// negative, finite log-probabilities, and text cells of at most
// MaxTextBytes. It returns a *FieldError.
func (r *Row) Validate() error {
	bad := func(col, format string, a ...any) error {
		return &FieldError{Episode: r.EpisodeID, Column: col, Problem: fmt.Sprintf(format, a...)}
	}
	if r.EpisodeID == "" {
		return bad("episode_id", "empty")
	}
	if r.RunID == "" {
		return bad("run_id", "empty")
	}
	cur, _ := strconv.Atoi(SchemaVersion)
	if v, err := strconv.Atoi(r.SchemaVersion); err != nil || v < 1 || v > cur {
		return bad("schema_version", "%q is not a trajectory schema version this reader knows (1 to %s)", r.SchemaVersion, SchemaVersion)
	}
	switch {
	case math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0):
		return bad("reward", "%v is not a finite number", r.Reward)
	case math.Abs(r.Reward) > MaxAbsReward:
		return bad("reward", "%g is outside ±%d", r.Reward, MaxAbsReward)
	}
	if t := r.Temperature; t != nil && (math.IsNaN(*t) || math.IsInf(*t, 0) || *t < 0) {
		return bad("temperature", "%v is not a finite number ≥ 0", *t)
	}
	for col, n := range map[string]int64{"prompt_tokens": r.PromptTokens, "completion_tokens": r.CompletionTokens, "num_turns": int64(r.NumTurns)} {
		if n < 0 {
			return bad(col, "%d is negative", n)
		}
	}
	text := func(col string, s string) error {
		if len(s) > MaxTextBytes {
			return bad(col, "%d bytes, more than %d", len(s), MaxTextBytes)
		}
		return nil
	}
	if err := text("final_answer", r.FinalAnswer); err != nil {
		return err
	}
	if err := text("error", r.Error); err != nil {
		return err
	}
	for i, m := range r.Messages {
		if err := text(fmt.Sprintf("messages[%d].content", i), m.Content); err != nil {
			return err
		}
	}
	for i := range r.Turns {
		if err := r.validateTurn(i, bad, text); err != nil {
			return err
		}
	}
	return nil
}

func (r *Row) validateTurn(i int, bad func(col, format string, a ...any) error, text func(col, s string) error) error {
	t := &r.Turns[i]
	col := func(name string) string { return fmt.Sprintf("turns[%d].%s", i, name) }
	for name, s := range map[string]string{"raw_text": t.RawText, "reasoning": t.Reasoning, "params_json": t.ParamsJSON,
		"observation": t.Observation, "stdout": t.Stdout, "stderr": t.Stderr} {
		if err := text(col(name), s); err != nil {
			return err
		}
	}
	if len(t.FilesJSON) > MaxTextBytes {
		// The bound is on each file: their JSON object escapes what the
		// agent's code wrote (a '<' takes 6 bytes), so a file within
		// schemas.MaxOutputFileBytes may encode to more than the bound.
		var files map[string]string
		if err := json.Unmarshal([]byte(t.FilesJSON), &files); err != nil {
			return bad(col("files_json"), "%d bytes that are not a JSON object of files: %v", len(t.FilesJSON), err)
		}
		for name, data := range files {
			if err := text(fmt.Sprintf("%s[%q]", col("files_json"), name), data); err != nil {
				return err
			}
		}
	}
	for name, n := range map[string]int64{"prompt_tokens": int64(t.PromptTokens), "completion_tokens": int64(t.CompletionTokens),
		"duration_ms": t.DurationMS, "llm_latency_ms": t.LLMLatencyMS, "stdout_bytes": t.StdoutBytes,
		"stderr_bytes": t.StderrBytes, "observation_bytes": t.ObservationBytes} {
		if n < 0 {
			return bad(col(name), "%d is negative", n)
		}
	}
	for j, id := range t.CompletionTokenIDs {
		if id < 0 {
			return bad(col("completion_token_ids"), "token %d is %d", j, id)
		}
	}
	for j, lp := range t.CompletionLogprobs {
		if math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0) {
			return bad(col("completion_logprobs"), "token %d: %v is not a finite number", j, lp)
		}
	}
	return nil
}
