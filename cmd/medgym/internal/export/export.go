package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/medgym/medgym/agent"
	"github.com/medgym/medgym/schemas"
)

// Name is the interaction name (verl) and environment class (SkyRL) under
// which the adapters in clients/python register medgym.
const Name = "medgym"

// Ref is the task reference that stands where a framework expects a ground
// truth: it names the task, and only the server can score against it.
func Ref(t schemas.TaskView) string {
	return "medgym://" + t.Dataset + "/" + t.Split + "/" + t.ID
}

// Message is a chat message as the frameworks read it.
type Message = schemas.ChatMessage

// VerlRecord is one row of verl's RL dataset.
type VerlRecord struct {
	DataSource  string      `json:"data_source"`
	Prompt      []Message   `json:"prompt"`
	Ability     string      `json:"ability"`
	RewardModel RewardModel `json:"reward_model"`
	ExtraInfo   ExtraInfo   `json:"extra_info"`
}

// RewardModel is verl's reward_model column: a rule-style reward whose
// ground_truth is the task reference.
type RewardModel struct {
	Style       string `json:"style"`
	GroundTruth string `json:"ground_truth"`
}

// ExtraInfo is verl's extra_info column.
type ExtraInfo struct {
	Index             int               `json:"index"`
	TaskID            string            `json:"task_id"`
	Dataset           string            `json:"dataset"`
	Split             string            `json:"split"`
	InteractionKwargs InteractionKwargs `json:"interaction_kwargs"`
}

// InteractionKwargs name the task a row plays: medgym's verl agent loop
// (clients/python/medgym/verl_agent.py) opens a session for TaskID. Name
// selected verl's interaction up to verl 0.7.
type InteractionKwargs struct {
	Name    string `json:"name"`
	TaskID  string `json:"task_id"`
	Dataset string `json:"dataset"`
	Split   string `json:"split"`
}

// PromptRecord is one row of the prompt-only dataset (TRL GRPO, SkyRL).
type PromptRecord struct {
	Prompt     []Message `json:"prompt"`
	EnvClass   string    `json:"env_class"`
	TaskID     string    `json:"task_id"`
	Dataset    string    `json:"dataset"`
	Split      string    `json:"split"`
	DataSource string    `json:"data_source"`
}

var (
	messagesType = arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "content", Type: arrow.BinaryTypes.String}))
	strField = func(n string) arrow.Field { return arrow.Field{Name: n, Type: arrow.BinaryTypes.String} }

	// VerlSchema is the Arrow schema of the verl dataset.
	VerlSchema = arrow.NewSchema([]arrow.Field{
		strField("data_source"), {Name: "prompt", Type: messagesType}, strField("ability"),
		{Name: "reward_model", Type: arrow.StructOf(strField("style"), strField("ground_truth"))},
		{Name: "extra_info", Type: arrow.StructOf(
			arrow.Field{Name: "index", Type: arrow.PrimitiveTypes.Int64},
			strField("task_id"), strField("dataset"), strField("split"),
			arrow.Field{Name: "interaction_kwargs", Type: arrow.StructOf(
				strField("name"), strField("task_id"), strField("dataset"), strField("split"))})},
	}, nil)
	// PromptSchema is the Arrow schema of the prompt-only dataset.
	PromptSchema = arrow.NewSchema([]arrow.Field{
		{Name: "prompt", Type: messagesType}, strField("env_class"), strField("task_id"),
		strField("dataset"), strField("split"), strField("data_source"),
	}, nil)
)

// Records builds both datasets' rows for tasks, whose prompts are laid out by
// opt (agent.EpisodePromptOptions of the sessions' options).
func Records(tasks []schemas.TaskView, opt agent.PromptOptions) ([]VerlRecord, []PromptRecord, error) {
	verl := make([]VerlRecord, 0, len(tasks))
	prompts := make([]PromptRecord, 0, len(tasks))
	for i, t := range tasks {
		if err := t.Validate(); err != nil {
			return nil, nil, fmt.Errorf("export task %d: %w", i, err)
		}
		msgs := agent.BuildMessages(t, opt)
		source := Name + "/" + t.Dataset
		verl = append(verl, VerlRecord{
			DataSource: source, Prompt: msgs, Ability: t.Dataset,
			RewardModel: RewardModel{Style: "rule", GroundTruth: Ref(t)},
			ExtraInfo: ExtraInfo{Index: i, TaskID: t.ID, Dataset: t.Dataset, Split: t.Split,
				InteractionKwargs: InteractionKwargs{Name: Name, TaskID: t.ID, Dataset: t.Dataset, Split: t.Split}},
		})
		prompts = append(prompts, PromptRecord{Prompt: msgs, EnvClass: Name, TaskID: t.ID, Dataset: t.Dataset,
			Split: t.Split, DataSource: source})
	}
	return verl, prompts, nil
}

// Write writes rows as path (Parquet with schema s) and, when jsonl, as the
// same path with a .jsonl extension.
func Write[T any](path string, s *arrow.Schema, rows []T, jsonl bool) error {
	if len(rows) == 0 {
		return fmt.Errorf("export %s: no tasks", filepath.Base(path))
	}
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	enc.SetEscapeHTML(false)
	for i := range rows {
		if err := enc.Encode(rows[i]); err != nil {
			return fmt.Errorf("export %s row %d: %w", filepath.Base(path), i, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if jsonl {
		if err := os.WriteFile(trimExt(path)+".jsonl", lines.Bytes(), 0o644); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, s, bytes.NewReader(lines.Bytes()), array.WithMultipleDocs())
	if err != nil {
		return fmt.Errorf("export %s: %w", filepath.Base(path), err)
	}
	defer rec.Release()
	tbl := array.NewTableFromRecords(s, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var pq bytes.Buffer
	if err := pqarrow.WriteTable(tbl, &pq, 100_000, nil, pqarrow.DefaultWriterProps()); err != nil {
		return fmt.Errorf("export %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, pq.Bytes(), 0o644); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

func trimExt(p string) string { return p[:len(p)-len(filepath.Ext(p))] }
