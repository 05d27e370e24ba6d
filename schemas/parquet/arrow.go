package parquet

import (
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// MetadataVersionKey is the schema-metadata key that carries SchemaVersion
// in every file.
const MetadataVersionKey = "medgym.schema_version"

var messageType = arrow.StructOf(
	arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "content", Type: arrow.BinaryTypes.String},
)

var turnType = arrow.StructOf(
	arrow.Field{Name: "index", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "raw_text", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "reasoning", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "finish_reason", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "action", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "params_json", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "parse_error", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "observation", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "exec_status", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "exit_code", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "stdout", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "stderr", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "truncated", Type: arrow.FixedWidthTypes.Boolean},
	arrow.Field{Name: "accepted", Type: arrow.FixedWidthTypes.Boolean},
	arrow.Field{Name: "duration_ms", Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: "llm_latency_ms", Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: "prompt_tokens", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "completion_tokens", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "prompt_token_ids", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
	arrow.Field{Name: "completion_token_ids", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
	arrow.Field{Name: "completion_logprobs", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)},
	arrow.Field{Name: "files_json", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "stdout_bytes", Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: "stderr_bytes", Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: "observation_bytes", Type: arrow.PrimitiveTypes.Int64},
)

// Column indexes of the top-level fields; the order of schema's fields.
const (
	colRunID = iota
	colEpisodeID
	colTaskID
	colDataset
	colCategory
	colSplit
	colSampleIndex
	colAttempt
	colPolicy
	colModel
	colPolicyVersion
	colTemperature
	colReward
	colOutcome
	colTermination
	colNumTurns
	colFinalAnswer
	colError
	colStartedAt
	colFinishedAt
	colVerifierVersion
	colVerifierMode
	colSchemaVersion
	colPromptTokens
	colCompletionTokens
	colMessages
	colTurns
	colAgentTreeHash
	colVerifierTreeHash
	colObservationRole
	colLabelSet
	numCols
)

func str(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.BinaryTypes.String} }

var schema = arrow.NewSchema([]arrow.Field{
	colRunID:            str("run_id"),
	colEpisodeID:        str("episode_id"),
	colTaskID:           str("task_id"),
	colDataset:          str("dataset"),
	colCategory:         str("category"),
	colSplit:            str("split"),
	colSampleIndex:      {Name: "sample_index", Type: arrow.PrimitiveTypes.Int32},
	colAttempt:          {Name: "attempt", Type: arrow.PrimitiveTypes.Int32},
	colPolicy:           str("policy"),
	colModel:            str("model"),
	colPolicyVersion:    {Name: "policy_version", Type: arrow.PrimitiveTypes.Int32},
	colTemperature:      {Name: "temperature", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	colReward:           {Name: "reward", Type: arrow.PrimitiveTypes.Float64},
	colOutcome:          str("outcome"),
	colTermination:      str("termination"),
	colNumTurns:         {Name: "num_turns", Type: arrow.PrimitiveTypes.Int32},
	colFinalAnswer:      str("final_answer"),
	colError:            str("error"),
	colStartedAt:        {Name: "started_at", Type: arrow.FixedWidthTypes.Timestamp_us},
	colFinishedAt:       {Name: "finished_at", Type: arrow.FixedWidthTypes.Timestamp_us},
	colVerifierVersion:  str("verifier_version"),
	colVerifierMode:     str("verifier_mode"),
	colSchemaVersion:    str("schema_version"),
	colPromptTokens:     {Name: "prompt_tokens", Type: arrow.PrimitiveTypes.Int64},
	colCompletionTokens: {Name: "completion_tokens", Type: arrow.PrimitiveTypes.Int64},
	colMessages:         {Name: "messages", Type: arrow.ListOfNonNullable(messageType)},
	colTurns:            {Name: "turns", Type: arrow.ListOfNonNullable(turnType)},
	colAgentTreeHash:    str("agent_tree_hash"),
	colVerifierTreeHash: str("verifier_tree_hash"),
	colObservationRole:  str("observation_role"),
	colLabelSet:         str("label_set"),
}, func() *arrow.Metadata {
	m := arrow.NewMetadata([]string{MetadataVersionKey}, []string{SchemaVersion})
	return &m
}())

// Schema returns the Arrow schema of trajectory rows. Callers must not
// modify it.
func Schema() *arrow.Schema { return schema }

// NewRecord builds an Arrow record batch of rows (in order). The caller
// releases it.
func NewRecord(mem memory.Allocator, rows []Row) arrow.RecordBatch {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	b.Reserve(len(rows))
	for i := range rows {
		appendRow(b, &rows[i])
	}
	return b.NewRecordBatch()
}

func appendRow(b *array.RecordBuilder, r *Row) {
	s := func(col int, v string) { b.Field(col).(*array.StringBuilder).Append(v) }
	i32 := func(col int, v int32) { b.Field(col).(*array.Int32Builder).Append(v) }
	i64 := func(col int, v int64) { b.Field(col).(*array.Int64Builder).Append(v) }
	ts := func(col int, v time.Time) {
		b.Field(col).(*array.TimestampBuilder).Append(arrow.Timestamp(v.UnixMicro()))
	}

	s(colRunID, r.RunID)
	s(colEpisodeID, r.EpisodeID)
	s(colTaskID, r.TaskID)
	s(colDataset, r.Dataset)
	s(colCategory, r.Category)
	s(colSplit, r.Split)
	i32(colSampleIndex, r.SampleIndex)
	i32(colAttempt, r.Attempt)
	s(colPolicy, r.Policy)
	s(colModel, r.Model)
	i32(colPolicyVersion, r.PolicyVersion)
	tb := b.Field(colTemperature).(*array.Float64Builder)
	if r.Temperature != nil {
		tb.Append(*r.Temperature)
	} else {
		tb.AppendNull()
	}
	b.Field(colReward).(*array.Float64Builder).Append(r.Reward)
	s(colOutcome, r.Outcome)
	s(colTermination, r.Termination)
	i32(colNumTurns, r.NumTurns)
	s(colFinalAnswer, r.FinalAnswer)
	s(colError, r.Error)
	ts(colStartedAt, r.StartedAt)
	ts(colFinishedAt, r.FinishedAt)
	s(colVerifierVersion, r.VerifierVersion)
	s(colVerifierMode, r.VerifierMode)
	s(colSchemaVersion, r.SchemaVersion)
	i64(colPromptTokens, r.PromptTokens)
	i64(colCompletionTokens, r.CompletionTokens)

	mb := b.Field(colMessages).(*array.ListBuilder)
	mb.Append(true)
	ms := mb.ValueBuilder().(*array.StructBuilder)
	for _, m := range r.Messages {
		ms.Append(true)
		ms.FieldBuilder(0).(*array.StringBuilder).Append(m.Role)
		ms.FieldBuilder(1).(*array.StringBuilder).Append(m.Content)
	}

	lb := b.Field(colTurns).(*array.ListBuilder)
	lb.Append(true)
	appendTurns(lb.ValueBuilder().(*array.StructBuilder), r.Turns)
	s(colAgentTreeHash, r.AgentTreeHash)
	s(colVerifierTreeHash, r.VerifierTreeHash)
	s(colObservationRole, r.ObservationRole)
	s(colLabelSet, r.LabelSet)
}

func appendTurns(sb *array.StructBuilder, turns []Turn) {
	s := func(i int, v string) { sb.FieldBuilder(i).(*array.StringBuilder).Append(v) }
	i32 := func(i int, v int32) { sb.FieldBuilder(i).(*array.Int32Builder).Append(v) }
	i64 := func(i int, v int64) { sb.FieldBuilder(i).(*array.Int64Builder).Append(v) }
	bl := func(i int, v bool) { sb.FieldBuilder(i).(*array.BooleanBuilder).Append(v) }
	for k := range turns {
		t := &turns[k]
		sb.Append(true)
		i32(0, t.Index)
		s(1, t.RawText)
		s(2, t.Reasoning)
		s(3, t.FinishReason)
		s(4, t.Action)
		s(5, t.ParamsJSON)
		s(6, t.ParseError)
		s(7, t.Observation)
		s(8, t.ExecStatus)
		i32(9, t.ExitCode)
		s(10, t.Stdout)
		s(11, t.Stderr)
		bl(12, t.Truncated)
		bl(13, t.Accepted)
		i64(14, t.DurationMS)
		i64(15, t.LLMLatencyMS)
		i32(16, t.PromptTokens)
		i32(17, t.CompletionTokens)
		appendList(sb.FieldBuilder(18).(*array.ListBuilder), t.PromptTokenIDs, func(vb array.Builder, v int32) { vb.(*array.Int32Builder).Append(v) })
		appendList(sb.FieldBuilder(19).(*array.ListBuilder), t.CompletionTokenIDs, func(vb array.Builder, v int32) { vb.(*array.Int32Builder).Append(v) })
		appendList(sb.FieldBuilder(20).(*array.ListBuilder), t.CompletionLogprobs, func(vb array.Builder, v float32) { vb.(*array.Float32Builder).Append(v) })
		s(21, t.FilesJSON)
		i64(22, t.StdoutBytes)
		i64(23, t.StderrBytes)
		i64(24, t.ObservationBytes)
	}
}

func appendList[T any](lb *array.ListBuilder, vs []T, add func(array.Builder, T)) {
	lb.Append(true)
	vb := lb.ValueBuilder()
	for _, v := range vs {
		add(vb, v)
	}
}

// RowsFromRecord converts a record batch back into rows. Columns are found
// by name, so a batch from an older or newer schema version converts as far
// as the columns agree: a missing column leaves its field zero; a column of
// an unexpected type is an error.
func RowsFromRecord(rec arrow.RecordBatch) ([]Row, error) {
	n := int(rec.NumRows())
	rows := make([]Row, n)
	sch := rec.Schema()
	for c, f := range schema.Fields() {
		idx := sch.FieldIndices(f.Name)
		if len(idx) == 0 {
			continue
		}
		if err := readColumn(c, rec.Column(idx[0]), rows); err != nil {
			return nil, fmt.Errorf("read column %s: %w", f.Name, err)
		}
	}
	return rows, nil
}

func readColumn(c int, a arrow.Array, rows []Row) error {
	switch c {
	case colRunID:
		return readStrings(a, rows, func(r *Row, v string) { r.RunID = v })
	case colEpisodeID:
		return readStrings(a, rows, func(r *Row, v string) { r.EpisodeID = v })
	case colTaskID:
		return readStrings(a, rows, func(r *Row, v string) { r.TaskID = v })
	case colDataset:
		return readStrings(a, rows, func(r *Row, v string) { r.Dataset = v })
	case colCategory:
		return readStrings(a, rows, func(r *Row, v string) { r.Category = v })
	case colSplit:
		return readStrings(a, rows, func(r *Row, v string) { r.Split = v })
	case colSampleIndex:
		return readPrim[int32](a, rows, func(r *Row, v int32) { r.SampleIndex = v })
	case colAttempt:
		return readPrim[int32](a, rows, func(r *Row, v int32) { r.Attempt = v })
	case colPolicy:
		return readStrings(a, rows, func(r *Row, v string) { r.Policy = v })
	case colModel:
		return readStrings(a, rows, func(r *Row, v string) { r.Model = v })
	case colPolicyVersion:
		return readPrim[int32](a, rows, func(r *Row, v int32) { r.PolicyVersion = v })
	case colTemperature:
		return readPrim[float64](a, rows, func(r *Row, v float64) { r.Temperature = &v })
	case colReward:
		return readPrim[float64](a, rows, func(r *Row, v float64) { r.Reward = v })
	case colOutcome:
		return readStrings(a, rows, func(r *Row, v string) { r.Outcome = v })
	case colTermination:
		return readStrings(a, rows, func(r *Row, v string) { r.Termination = v })
	case colNumTurns:
		return readPrim[int32](a, rows, func(r *Row, v int32) { r.NumTurns = v })
	case colFinalAnswer:
		return readStrings(a, rows, func(r *Row, v string) { r.FinalAnswer = v })
	case colError:
		return readStrings(a, rows, func(r *Row, v string) { r.Error = v })
	case colStartedAt:
		return readTimes(a, rows, func(r *Row, v time.Time) { r.StartedAt = v })
	case colFinishedAt:
		return readTimes(a, rows, func(r *Row, v time.Time) { r.FinishedAt = v })
	case colVerifierVersion:
		return readStrings(a, rows, func(r *Row, v string) { r.VerifierVersion = v })
	case colVerifierMode:
		return readStrings(a, rows, func(r *Row, v string) { r.VerifierMode = v })
	case colSchemaVersion:
		return readStrings(a, rows, func(r *Row, v string) { r.SchemaVersion = v })
	case colPromptTokens:
		return readPrim[int64](a, rows, func(r *Row, v int64) { r.PromptTokens = v })
	case colCompletionTokens:
		return readPrim[int64](a, rows, func(r *Row, v int64) { r.CompletionTokens = v })
	case colMessages:
		return readMessages(a, rows)
	case colTurns:
		return readTurns(a, rows)
	case colAgentTreeHash: // absent from files before schema version 3
		return readStrings(a, rows, func(r *Row, v string) { r.AgentTreeHash = v })
	case colVerifierTreeHash:
		return readStrings(a, rows, func(r *Row, v string) { r.VerifierTreeHash = v })
	case colObservationRole: // absent from files before schema version 5
		return readStrings(a, rows, func(r *Row, v string) { r.ObservationRole = v })
	case colLabelSet: // absent from files before schema version 7
		return readStrings(a, rows, func(r *Row, v string) { r.LabelSet = v })
	}
	return nil
}

// stringer is the part of array.String and array.LargeString readers use.
type stringer interface {
	arrow.Array
	Value(int) string
}

func readStrings(a arrow.Array, rows []Row, set func(*Row, string)) error {
	sa, ok := a.(stringer)
	if !ok {
		return fmt.Errorf("type %s, want string", a.DataType())
	}
	for i := range rows {
		if sa.IsValid(i) {
			set(&rows[i], sa.Value(i))
		}
	}
	return nil
}

type valuer[T any] interface {
	arrow.Array
	Value(int) T
}

func readPrim[T int32 | int64 | float64](a arrow.Array, rows []Row, set func(*Row, T)) error {
	va, ok := a.(valuer[T])
	if !ok {
		return fmt.Errorf("type %s, want %T", a.DataType(), *new(T))
	}
	for i := range rows {
		if va.IsValid(i) {
			set(&rows[i], va.Value(i))
		}
	}
	return nil
}

func readTimes(a arrow.Array, rows []Row, set func(*Row, time.Time)) error {
	ta, ok := a.(*array.Timestamp)
	if !ok {
		return fmt.Errorf("type %s, want timestamp", a.DataType())
	}
	unit := ta.DataType().(*arrow.TimestampType).Unit
	for i := range rows {
		if ta.IsValid(i) {
			set(&rows[i], fromTimestamp(ta.Value(i), unit))
		}
	}
	return nil
}

func fromTimestamp(v arrow.Timestamp, unit arrow.TimeUnit) time.Time {
	var t time.Time
	switch unit {
	case arrow.Second:
		t = time.Unix(int64(v), 0)
	case arrow.Millisecond:
		t = time.UnixMilli(int64(v))
	case arrow.Microsecond:
		t = time.UnixMicro(int64(v))
	default:
		t = time.Unix(0, int64(v))
	}
	return t.UTC()
}

// structList checks that a is list<struct> and returns both levels.
func structList(a arrow.Array) (*array.List, *array.Struct, error) {
	la, ok := a.(*array.List)
	if !ok {
		return nil, nil, fmt.Errorf("type %s, want list<struct>", a.DataType())
	}
	sa, ok := la.ListValues().(*array.Struct)
	if !ok {
		return nil, nil, fmt.Errorf("type %s, want list<struct>", a.DataType())
	}
	return la, sa, nil
}

// structField returns the child of sa named name, or nil when absent.
func structField(sa *array.Struct, name string) arrow.Array {
	st := sa.DataType().(*arrow.StructType)
	i, ok := st.FieldIdx(name)
	if !ok {
		return nil
	}
	return sa.Field(i)
}

func readMessages(a arrow.Array, rows []Row) error {
	la, sa, err := structList(a)
	if err != nil {
		return err
	}
	role, _ := structField(sa, "role").(stringer)
	content, _ := structField(sa, "content").(stringer)
	for i := range rows {
		if la.IsNull(i) {
			continue
		}
		start, end := la.ValueOffsets(i)
		if start == end {
			continue
		}
		ms := make([]Message, 0, end-start)
		for j := int(start); j < int(end); j++ {
			var m Message
			if role != nil && role.IsValid(j) {
				m.Role = role.Value(j)
			}
			if content != nil && content.IsValid(j) {
				m.Content = content.Value(j)
			}
			ms = append(ms, m)
		}
		rows[i].Messages = ms
	}
	return nil
}

// turnReader reads one field of a turn struct, by element index.
type turnReader func(t *Turn, j int)

func turnString(sa *array.Struct, name string, set func(*Turn, string)) (turnReader, error) {
	a := structField(sa, name)
	if a == nil {
		return nil, nil
	}
	v, ok := a.(stringer)
	if !ok {
		return nil, fmt.Errorf("turn field %s: type %s, want string", name, a.DataType())
	}
	return func(t *Turn, j int) {
		if v.IsValid(j) {
			set(t, v.Value(j))
		}
	}, nil
}

func turnValue[T int32 | int64 | bool](sa *array.Struct, name string, set func(*Turn, T)) (turnReader, error) {
	a := structField(sa, name)
	if a == nil {
		return nil, nil
	}
	v, ok := a.(valuer[T])
	if !ok {
		return nil, fmt.Errorf("turn field %s: type %s, want %T", name, a.DataType(), *new(T))
	}
	return func(t *Turn, j int) {
		if v.IsValid(j) {
			set(t, v.Value(j))
		}
	}, nil
}

func turnList[T int32 | float32](sa *array.Struct, name string, set func(*Turn, []T)) (turnReader, error) {
	a := structField(sa, name)
	if a == nil {
		return nil, nil
	}
	la, ok := a.(*array.List)
	if !ok {
		return nil, fmt.Errorf("turn field %s: type %s, want list", name, a.DataType())
	}
	vals, ok := la.ListValues().(valuer[T])
	if !ok {
		return nil, fmt.Errorf("turn field %s: type %s, want list<%T>", name, a.DataType(), *new(T))
	}
	return func(t *Turn, j int) {
		if la.IsNull(j) {
			return
		}
		start, end := la.ValueOffsets(j)
		if start == end {
			return
		}
		out := make([]T, 0, end-start)
		for k := int(start); k < int(end); k++ {
			out = append(out, vals.Value(k))
		}
		set(t, out)
	}, nil
}

func readTurns(a arrow.Array, rows []Row) error {
	la, sa, err := structList(a)
	if err != nil {
		return err
	}
	var readers []turnReader
	var errs []error
	add := func(r turnReader, err error) {
		if err != nil {
			errs = append(errs, err)
		}
		if r != nil {
			readers = append(readers, r)
		}
	}
	add(turnValue(sa, "index", func(t *Turn, v int32) { t.Index = v }))
	add(turnString(sa, "raw_text", func(t *Turn, v string) { t.RawText = v }))
	add(turnString(sa, "reasoning", func(t *Turn, v string) { t.Reasoning = v }))
	add(turnString(sa, "finish_reason", func(t *Turn, v string) { t.FinishReason = v }))
	add(turnString(sa, "action", func(t *Turn, v string) { t.Action = v }))
	add(turnString(sa, "params_json", func(t *Turn, v string) { t.ParamsJSON = v }))
	add(turnString(sa, "parse_error", func(t *Turn, v string) { t.ParseError = v }))
	add(turnString(sa, "observation", func(t *Turn, v string) { t.Observation = v }))
	add(turnString(sa, "exec_status", func(t *Turn, v string) { t.ExecStatus = v }))
	add(turnValue(sa, "exit_code", func(t *Turn, v int32) { t.ExitCode = v }))
	add(turnString(sa, "stdout", func(t *Turn, v string) { t.Stdout = v }))
	add(turnString(sa, "stderr", func(t *Turn, v string) { t.Stderr = v }))
	add(turnValue(sa, "truncated", func(t *Turn, v bool) { t.Truncated = v }))
	add(turnValue(sa, "accepted", func(t *Turn, v bool) { t.Accepted = v }))
	add(turnValue(sa, "duration_ms", func(t *Turn, v int64) { t.DurationMS = v }))
	add(turnValue(sa, "llm_latency_ms", func(t *Turn, v int64) { t.LLMLatencyMS = v }))
	add(turnValue(sa, "prompt_tokens", func(t *Turn, v int32) { t.PromptTokens = v }))
	add(turnValue(sa, "completion_tokens", func(t *Turn, v int32) { t.CompletionTokens = v }))
	add(turnList(sa, "prompt_token_ids", func(t *Turn, v []int32) { t.PromptTokenIDs = v }))
	add(turnList(sa, "completion_token_ids", func(t *Turn, v []int32) { t.CompletionTokenIDs = v }))
	add(turnList(sa, "completion_logprobs", func(t *Turn, v []float32) { t.CompletionLogprobs = v }))
	if structField(sa, "files_json") != nil { // absent from schema version 1 files
		add(turnString(sa, "files_json", func(t *Turn, v string) { t.FilesJSON = v }))
	}
	// Absent from files before schema version 4: the sizes read as 0.
	for name, set := range map[string]func(*Turn, int64){
		"stdout_bytes":      func(t *Turn, v int64) { t.StdoutBytes = v },
		"stderr_bytes":      func(t *Turn, v int64) { t.StderrBytes = v },
		"observation_bytes": func(t *Turn, v int64) { t.ObservationBytes = v },
	} {
		if structField(sa, name) != nil {
			add(turnValue(sa, name, set))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i := range rows {
		if la.IsNull(i) {
			continue
		}
		start, end := la.ValueOffsets(i)
		if start == end {
			continue
		}
		ts := make([]Turn, end-start)
		for j := int(start); j < int(end); j++ {
			for _, r := range readers {
				r(&ts[j-int(start)], j)
			}
		}
		rows[i].Turns = ts
	}
	return nil
}
