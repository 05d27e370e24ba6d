package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Arrow schemas of the Parquet exports; field names equal the JSON keys.
var (
	messagesType = arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "content", Type: arrow.BinaryTypes.String}))
	maskType = arrow.ListOf(arrow.PrimitiveTypes.Int8)

	// SFTSchema is the schema of SFT and rejection-sampling files.
	SFTSchema = arrow.NewSchema([]arrow.Field{
		field("messages", messagesType), field("loss_mask", maskType),
		str("run_id"), str("episode_id"), str("task_id"), str("dataset"), str("split"),
		field("reward", arrow.PrimitiveTypes.Float64), field("num_turns", arrow.PrimitiveTypes.Int64),
	}, nil)
	// DPOSchema is the schema of TRL preference files.
	DPOSchema = arrow.NewSchema([]arrow.Field{
		field("prompt", messagesType), field("chosen", messagesType), field("rejected", messagesType),
		str("kind"), str("task_id"), str("dataset"), str("split"), str("chosen_episode"), str("rejected_episode"),
		field("chosen_reward", arrow.PrimitiveTypes.Float64), field("rejected_reward", arrow.PrimitiveTypes.Float64),
	}, nil)
	// VerifierSchema is the schema of YES/NO verifier files.
	VerifierSchema = arrow.NewSchema([]arrow.Field{
		field("messages", messagesType), field("loss_mask", maskType), str("run_id"), str("label"), field("passed", arrow.FixedWidthTypes.Boolean),
		str("episode_id"), str("task_id"), str("dataset"),
	}, nil)
	// TRLSchema is the schema of TRL prompt/completion files.
	TRLSchema = arrow.NewSchema([]arrow.Field{
		field("prompt", messagesType), field("completion", messagesType), field("turn", arrow.PrimitiveTypes.Int64),
		str("run_id"), str("episode_id"), str("task_id"), str("dataset"), str("split"),
	}, nil)
	// GRPOSchema is the schema of GRPO batch files.
	GRPOSchema = arrow.NewSchema([]arrow.Field{
		str("group_id"), str("task_id"), str("dataset"), str("split"),
		field("policy_version", arrow.PrimitiveTypes.Int32), field("sample_index", arrow.PrimitiveTypes.Int32),
		str("run_id"), str("episode_id"), str("outcome"),
		field("reward", arrow.PrimitiveTypes.Float64), field("advantage", arrow.PrimitiveTypes.Float64),
		field("weight", arrow.PrimitiveTypes.Float64),
		field("prompt", messagesType), field("completion", messagesType), field("completion_mask", maskType),
		field("completion_token_ids", arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Int32))),
		field("completion_logprobs", arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Float32))),
		field("same_context", arrow.FixedWidthTypes.Boolean), field("correct_reward", arrow.PrimitiveTypes.Float64),
	}, nil)
)

func field(name string, t arrow.DataType) arrow.Field { return arrow.Field{Name: name, Type: t} }
func str(name string) arrow.Field                     { return field(name, arrow.BinaryTypes.String) }

// WriteJSONL writes one JSON object per line to path (creating its
// directory) and returns the encoded lines, which WriteParquet reuses.
func WriteJSONL[T any](path string, recs []T) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range recs {
		if err := enc.Encode(recs[i]); err != nil {
			return nil, fmt.Errorf("encode %s record %d: %w", filepath.Base(path), i, err)
		}
	}
	if err := writeFile(path, buf.Bytes()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteParquet converts JSONL to a zstd Parquet file with schema s.
func WriteParquet(path string, s *arrow.Schema, jsonl []byte) error {
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, s, bytes.NewReader(jsonl), array.WithMultipleDocs())
	if err != nil {
		return fmt.Errorf("parquet %s: %w", filepath.Base(path), err)
	}
	defer rec.Release()
	tbl := array.NewTableFromRecords(s, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	props := pq.NewWriterProperties(pq.WithCompression(compress.Codecs.Zstd), pq.WithMaxRowGroupLength(100_000))
	if err := pqarrow.WriteTable(tbl, &buf, 100_000, props, pqarrow.DefaultWriterProps()); err != nil {
		return fmt.Errorf("parquet %s: %w", filepath.Base(path), err)
	}
	return writeFile(path, buf.Bytes())
}

// writeBoth writes path.jsonl and path.parquet and returns their names
// relative to out.
func writeBoth[T any](out, rel string, s *arrow.Schema, recs []T) ([]string, error) {
	lines, err := WriteJSONL(filepath.Join(out, rel+".jsonl"), recs)
	if err != nil {
		return nil, err
	}
	if err := WriteParquet(filepath.Join(out, rel+".parquet"), s, lines); err != nil {
		return nil, err
	}
	return []string{rel + ".jsonl", rel + ".parquet"}, nil
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadJSONL reads a file written by WriteJSONL.
func ReadJSONL[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("read %s line %d: %w", path, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// llamaFactoryTags maps our openai-style messages for LLaMA-Factory
// (formats.md §5): observations are role "tool", or plain user turns when
// they were sampled (or exported) as role "user"; then the observation tag
// names a role no message has, so every user message stays a user turn
// (LLaMA-Factory's tag mapping would otherwise turn the task into an
// observation).
func llamaFactoryTags(obsRole string) map[string]string {
	obsTag := obsRole
	if obsRole == RoleUser {
		obsTag = "observation"
	}
	return map[string]string{"role_tag": "role", "content_tag": "content", "user_tag": RoleUser,
		"assistant_tag": RoleAssistant, "observation_tag": obsTag, "system_tag": RoleSystem}
}

// lfPair is a LLaMA-Factory ranking record: the conversation up to the
// fork, and single chosen/rejected messages.
type lfPair struct {
	Messages []Message `json:"messages"`
	Chosen   Message   `json:"chosen"`
	Rejected Message   `json:"rejected"`
}
