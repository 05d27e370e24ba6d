package parquet

import (
	"encoding/json"
	"time"

	"github.com/medgym/medgym/schemas"
)

// SchemaVersion is the version of the trajectory schema. Bump it on any
// change to the columns, together with testdata/schema.golden and the table
// in schemas/README.md.
const SchemaVersion = "7"

// Row is one episode: the Go form of one row of a trajectory file.
type Row struct {
	RunID         string
	EpisodeID     string
	TaskID        string
	Dataset       string
	Category      string
	Split         string
	SampleIndex   int32
	Attempt       int32
	Policy        string
	Model         string
	PolicyVersion int32
	// Temperature is nil when the policy left it to the endpoint's default.
	Temperature *float64
	Reward      float64
	Outcome     string
	Termination string
	NumTurns    int32
	FinalAnswer string
	Error       string
	// StartedAt and FinishedAt are UTC with microsecond precision (the
	// precision of the column).
	StartedAt       time.Time
	FinishedAt      time.Time
	VerifierVersion string
	VerifierMode    string
	SchemaVersion   string
	// PromptTokens and CompletionTokens are totals over all turns.
	PromptTokens     int64
	CompletionTokens int64
	Messages         []Message
	Turns            []Turn
	// AgentTreeHash and VerifierTreeHash are the content hashes of the task
	// library's agent tree (what the sandbox mounted) and verifier tree (the
	// task files that scored the episode), "sha256:<hex>"; "" when unknown,
	// as in rows of schema version 2 and earlier (added in version 3).
	AgentTreeHash    string
	VerifierTreeHash string
	// ObservationRole is the role observations were sent to the model
	// with when the episode was sampled ("user" for every llm-worker so
	// far); trainers render the conversation with it, so a model is
	// trained on the context it was sampled in. Added in schema version
	// 5; older rows read back "" (use ObsRole, which says "user").
	ObservationRole string
	// LabelSet is the label set the episode was scored against
	// ("medcalcbench@medgym-1"), so a rescore under another set knows what
	// it changes. Added in schema version 7; older rows read back "".
	LabelSet string
}

// DefaultObservationRole is the observation role of rows written before
// schema version 5: the llm-worker has always sent observations as user
// messages (as upstream does).
const DefaultObservationRole = "user"

// ObsRole is the role observations had when the episode was sampled.
func (r *Row) ObsRole() string {
	if r.ObservationRole == "" {
		return DefaultObservationRole
	}
	return r.ObservationRole
}

// observationRole is the role of the first non-assistant message after the
// first assistant message: what the model was shown as an observation.
func observationRole(msgs []schemas.ChatMessage) string {
	seen := false
	for _, m := range msgs {
		switch {
		case m.Role == "assistant":
			seen = true
		case seen:
			return m.Role
		}
	}
	return DefaultObservationRole
}

// Message is one chat message of the episode, in order.
type Message struct {
	Role    string
	Content string
}

// Turn is one policy step. Empty token-id and logprob lists read back as nil.
type Turn struct {
	Index              int32
	RawText            string
	Reasoning          string
	FinishReason       string
	Action             string
	ParamsJSON         string
	ParseError         string
	Observation        string
	ExecStatus         string
	ExitCode           int32
	Stdout             string
	Stderr             string
	Truncated          bool
	Accepted           bool
	DurationMS         int64
	LLMLatencyMS       int64
	PromptTokens       int32
	CompletionTokens   int32
	PromptTokenIDs     []int32
	CompletionTokenIDs []int32
	CompletionLogprobs []float32
	// FilesJSON holds the output files the task asked for (e.g. a
	// predictions CSV) as a JSON object name → content; "" when none.
	// Added in schema version 2.
	FilesJSON string
	// StdoutBytes, StderrBytes and ObservationBytes are the full sizes of
	// Stdout, Stderr and Observation, which are stored capped
	// (schemas.MaxStoredOutputBytes, with a marker). Added in schema
	// version 4; 0 in older rows.
	StdoutBytes      int64
	StderrBytes      int64
	ObservationBytes int64
}

// FromEpisode builds the row of a finished, scored episode. Identity fields
// come from the request; outcome, reward and verifier version from the
// score; the library's tree hashes from lib. Times are normalised to UTC microseconds so a row read back from a
// file equals the row written.
func FromEpisode(res schemas.EpisodeResult, sc schemas.Score, verifierMode string, lib schemas.TreeHashes) Row {
	req := res.Request
	r := Row{
		RunID:            req.RunID,
		EpisodeID:        req.EpisodeID,
		TaskID:           req.Task.ID,
		Dataset:          req.Task.Dataset,
		Category:         req.Task.Category,
		Split:            req.Task.Split,
		SampleIndex:      int32(req.SampleIndex),
		Attempt:          int32(req.Attempt),
		Policy:           req.Policy.Name,
		Model:            req.Policy.Model,
		PolicyVersion:    int32(req.Policy.Version),
		Reward:           sc.Reward,
		Outcome:          string(sc.Outcome),
		Termination:      string(res.Termination),
		NumTurns:         int32(len(res.Turns)),
		FinalAnswer:      res.FinalAnswer,
		Error:            res.Error,
		StartedAt:        normTime(res.StartedAt),
		FinishedAt:       normTime(res.FinishedAt),
		VerifierVersion:  sc.VerifierVersion,
		VerifierMode:     verifierMode,
		SchemaVersion:    SchemaVersion,
		AgentTreeHash:    lib.Agent,
		VerifierTreeHash: lib.Verifier,
		ObservationRole:  observationRole(res.Messages),
		LabelSet:         sc.LabelSet,
	}
	if req.Policy.Temperature != nil {
		t := *req.Policy.Temperature
		r.Temperature = &t
	}
	if len(res.Messages) > 0 {
		r.Messages = make([]Message, len(res.Messages))
		for i, m := range res.Messages {
			r.Messages[i] = Message{Role: m.Role, Content: m.Content}
		}
	}
	if len(res.Turns) > 0 {
		r.Turns = make([]Turn, len(res.Turns))
		for i, t := range res.Turns {
			r.PromptTokens += int64(t.PromptTokens)
			r.CompletionTokens += int64(t.CompletionTokens)
			r.Turns[i] = Turn{
				Index:              int32(t.Index),
				RawText:            t.RawText,
				Reasoning:          t.Reasoning,
				FinishReason:       t.FinishReason,
				Action:             t.ActionName,
				ParamsJSON:         t.ParamsJSON,
				ParseError:         t.ParseError,
				Observation:        t.Observation,
				ExecStatus:         t.ExecStatus,
				ExitCode:           int32(t.ExitCode),
				Stdout:             t.Stdout,
				Stderr:             t.Stderr,
				Truncated:          t.Truncated,
				Accepted:           t.Accepted,
				DurationMS:         t.DurationMS,
				LLMLatencyMS:       t.LLMLatencyMS,
				PromptTokens:       int32(t.PromptTokens),
				CompletionTokens:   int32(t.CompletionTokens),
				PromptTokenIDs:     cloneNonEmpty(t.PromptTokenIDs),
				CompletionTokenIDs: cloneNonEmpty(t.CompletionTokenIDs),
				CompletionLogprobs: cloneNonEmpty(t.CompletionLogprobs),
				FilesJSON:          filesJSON(t.Files),
				StdoutBytes:        t.StdoutBytes,
				StderrBytes:        t.StderrBytes,
				ObservationBytes:   t.ObservationBytes,
			}
		}
	}
	return r
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func cloneNonEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return append([]T(nil), s...)
}

// filesJSON encodes output files as a JSON object ("" when there are none).
func filesJSON(files map[string]string) string {
	if len(files) == 0 {
		return ""
	}
	b, err := json.Marshal(files) // a map of strings always marshals
	if err != nil {
		return ""
	}
	return string(b)
}
