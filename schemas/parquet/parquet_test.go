package parquet_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
)

var update = flag.Bool("update", false, "rewrite testdata/schema.golden")

func TestSchemaGolden(t *testing.T) {
	got := parquet.Schema().String() + "\n"
	path := filepath.Join("testdata", "schema.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("trajectory schema changed; review it, bump SchemaVersion and the README table, then run go test -update\n--- got\n%s\n--- want\n%s", got, want)
	}
}

func sampleResult() (schemas.EpisodeResult, schemas.Score) {
	temp := 0.6
	start := time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	res := schemas.EpisodeResult{
		Request: schemas.EpisodeRequest{
			RunID: "run-1", EpisodeID: "ep-7", SampleIndex: 3, Attempt: 1,
			Task: schemas.TaskView{ID: "mimic-42", Dataset: "mimic_iii", Category: "ehr", Split: "test",
				Question: "how many?"},
			Policy: schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "qwen", Temperature: &temp, Version: 5},
		},
		Messages: []schemas.ChatMessage{{Role: "system", Content: "be precise"}, {Role: "user", Content: "how many?"},
			{Role: "assistant", Content: `{"action":"validate_code"}`}, {Role: "tool", Content: "1\n"}},
		Turns: []schemas.Turn{
			{Index: 0, RawText: "r0", Reasoning: "think", FinishReason: "stop", ActionName: "validate_code",
				ParamsJSON: `{"code":"print(1)"}`, Observation: "1\n", ExecStatus: "ok", ExitCode: 0, Files: map[string]string{"predictions.csv": "id,prediction\n1,0\n"},
				Stdout: "1\n", Stderr: "warn", Truncated: true, StdoutBytes: 300_000, StderrBytes: 4, ObservationBytes: 300_004, Accepted: true, DurationMS: 120, LLMLatencyMS: 900,
				PromptTokens: 100, CompletionTokens: 20, PromptTokenIDs: []int32{1, 2, 3},
				CompletionTokenIDs: []int32{7, 8}, CompletionLogprobs: []float32{-0.5, -0.25}},
			{Index: 1, RawText: "garbage", ParseError: "no json", ExitCode: -1, PromptTokens: 130, CompletionTokens: 5},
		},
		FinalAnswer: "42",
		Termination: schemas.EndAccepted,
		Error:       "",
		StartedAt:   start,
		FinishedAt:  start.Add(1500 * time.Millisecond),
	}
	sc := schemas.Score{RunID: "run-1", EpisodeID: "ep-7", Outcome: schemas.OutcomeCorrect, Reward: 1,
		VerifierVersion: "v3", LabelSet: "mimic_iii@source"}
	return res, sc
}

var sampleHashes = schemas.TreeHashes{Agent: "sha256:aa", Verifier: "sha256:vv"}

func TestFromEpisode(t *testing.T) {
	t.Parallel()
	res, sc := sampleResult()
	r := parquet.FromEpisode(res, sc, "strict", sampleHashes)
	if r.RunID != "run-1" || r.EpisodeID != "ep-7" || r.TaskID != "mimic-42" || r.Dataset != "mimic_iii" ||
		r.Category != "ehr" || r.Split != "test" || r.SampleIndex != 3 || r.Attempt != 1 || r.Policy != "openai" ||
		r.Model != "qwen" || r.PolicyVersion != 5 || r.Outcome != "correct" || r.Reward != 1 ||
		r.Termination != "accepted" || r.VerifierVersion != "v3" || r.VerifierMode != "strict" ||
		r.SchemaVersion != parquet.SchemaVersion || r.FinalAnswer != "42" || r.LabelSet != "mimic_iii@source" {
		t.Errorf("identity fields wrong: %+v", r)
	}
	if r.NumTurns != 2 || r.PromptTokens != 230 || r.CompletionTokens != 25 {
		t.Errorf("totals: turns %d prompt %d completion %d, want 2 230 25", r.NumTurns, r.PromptTokens, r.CompletionTokens)
	}
	if r.Temperature == nil || *r.Temperature != 0.6 || r.Temperature == res.Request.Policy.Temperature {
		t.Errorf("temperature must be a copied 0.6, got %v", r.Temperature)
	}
	if r.StartedAt.Location() != time.UTC || r.StartedAt.Nanosecond() != 123456000 || r.StartedAt.Hour() != 9 {
		t.Errorf("started_at not normalised to UTC micros: %v", r.StartedAt)
	}
	if r.Turns[0].Action != "validate_code" || !r.Turns[0].Accepted || r.Turns[1].ParseError != "no json" ||
		r.Turns[1].PromptTokenIDs != nil {
		t.Errorf("turns wrong: %+v", r.Turns)
	}
	if r.Turns[0].StdoutBytes != 300_000 || r.Turns[0].StderrBytes != 4 || r.Turns[0].ObservationBytes != 300_004 {
		t.Errorf("full sizes not kept: %+v", r.Turns[0])
	}
	if r.Turns[0].FilesJSON != `{"predictions.csv":"id,prediction\n1,0\n"}` || r.Turns[1].FilesJSON != "" {
		t.Errorf("files_json: %q / %q", r.Turns[0].FilesJSON, r.Turns[1].FilesJSON)
	}
	if r.AgentTreeHash != "sha256:aa" || r.VerifierTreeHash != "sha256:vv" {
		t.Errorf("tree hashes: %q / %q", r.AgentTreeHash, r.VerifierTreeHash)
	}
	// The observation role is what the model was sent; rows from before
	// schema version 5 (no column) read it as "user".
	if r.ObservationRole != "tool" || r.ObsRole() != "tool" {
		t.Errorf("observation role %q, want tool (the role sent)", r.ObservationRole)
	}
	if old := (parquet.Row{}); old.ObsRole() != "user" {
		t.Errorf("a row without the column reads observation role %q, want user", old.ObsRole())
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	t.Parallel()
	res, sc := sampleResult()
	full := parquet.FromEpisode(res, sc, "strict", sampleHashes)
	// A row with nulls and empty lists: no temperature, no turns, no messages.
	empty := parquet.Row{RunID: "run-1", EpisodeID: "ep-8", Dataset: "mimic_iii", Outcome: "infra_failure",
		Error: "endpoint down", SchemaVersion: parquet.SchemaVersion}
	// A third row forces a second row group with rowGroupLength 2.
	third := full
	third.EpisodeID = "ep-9"
	third.Turns = []parquet.Turn{{Index: 0, CompletionLogprobs: []float32{-1}}}
	rows := []parquet.Row{full, empty, third}

	var buf bytes.Buffer
	if err := parquet.Write(&buf, rows, 2); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte("PAR1")) {
		t.Fatal("output is not a parquet file")
	}
	got, err := parquet.Read(t.Context(), bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("read %d rows, want %d", len(got), len(rows))
	}
	for i := range rows {
		if !reflect.DeepEqual(got[i], rows[i]) {
			t.Errorf("row %d differs:\n got  %+v\n want %+v", i, got[i], rows[i])
		}
	}
	if got[1].Temperature != nil {
		t.Errorf("null temperature read back as %v", *got[1].Temperature)
	}
	ids, err := parquet.ReadEpisodeIDs(t.Context(), bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids, []string{"ep-7", "ep-8", "ep-9"}) {
		t.Errorf("episode ids = %v", ids)
	}

	// The scoring columns: every field a re-score reads comes back as
	// written, and the rest (messages, the model's text, observations,
	// token data) stays zero.
	part, err := parquet.ReadColumns(t.Context(), bytes.NewReader(buf.Bytes()), parquet.ScoringColumns)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		want := rows[i]
		want.Messages, want.PromptTokens, want.CompletionTokens = nil, 0, 0
		if want.Turns != nil {
			want.Turns = slices.Clone(want.Turns)
			for j := range want.Turns {
				tr := want.Turns[j]
				want.Turns[j] = parquet.Turn{Index: tr.Index, Action: tr.Action, ParamsJSON: tr.ParamsJSON, ParseError: tr.ParseError,
					ExecStatus: tr.ExecStatus, ExitCode: tr.ExitCode, Stdout: tr.Stdout, Stderr: tr.Stderr, Truncated: tr.Truncated,
					Accepted: tr.Accepted, FilesJSON: tr.FilesJSON, StdoutBytes: tr.StdoutBytes, StderrBytes: tr.StderrBytes}
			}
		}
		if !reflect.DeepEqual(part[i], want) {
			t.Errorf("row %d, scoring columns:\n got  %+v\n want %+v", i, part[i], want)
		}
	}
	if _, err := parquet.ReadColumns(t.Context(), bytes.NewReader(buf.Bytes()), []string{"no_such"}); err == nil {
		t.Error("a read of no known column succeeded")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	res, sc := sampleResult()
	rows := []parquet.Row{parquet.FromEpisode(res, sc, "upstream", sampleHashes)}
	rec := parquet.NewRecord(mem, rows)
	defer rec.Release()
	if rec.NumRows() != 1 || rec.NumCols() != int64(len(parquet.Schema().Fields())) {
		t.Fatalf("record shape %dx%d", rec.NumRows(), rec.NumCols())
	}
	got, err := parquet.RowsFromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Errorf("got %+v\nwant %+v", got, rows)
	}
}

func TestReadRejectsGarbage(t *testing.T) {
	t.Parallel()
	if _, err := parquet.Read(t.Context(), bytes.NewReader([]byte("not parquet at all"))); err == nil {
		t.Error("want an error for a non-parquet input")
	}
}

// An older file with fewer columns converts; missing fields stay zero. A
// column of the wrong type is an error.
func TestRowsFromRecordByName(t *testing.T) {
	t.Parallel()
	mem := memory.NewGoAllocator()
	old := arrow.NewSchema([]arrow.Field{
		{Name: "episode_id", Type: arrow.BinaryTypes.String},
		{Name: "reward", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
	b := array.NewRecordBuilder(mem, old)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).Append("e1")
	b.Field(1).(*array.Float64Builder).Append(0.5)
	rec := b.NewRecordBatch()
	defer rec.Release()
	rows, err := parquet.RowsFromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rows, []parquet.Row{{EpisodeID: "e1", Reward: 0.5}}) {
		t.Errorf("rows = %+v", rows)
	}

	bad := arrow.NewSchema([]arrow.Field{{Name: "reward", Type: arrow.BinaryTypes.String}}, nil)
	bb := array.NewRecordBuilder(mem, bad)
	defer bb.Release()
	bb.Field(0).(*array.StringBuilder).Append("high")
	brec := bb.NewRecordBatch()
	defer brec.Release()
	if _, err := parquet.RowsFromRecord(brec); err == nil {
		t.Error("a string reward column converted without error")
	}
}

// Files of older schema versions (version 2: no tree hash columns, no
// observation role; versions 3 and 4: no observation role) read back with those
// fields empty and every other field intact.
func TestVersion2RowsReadWithoutHashes(t *testing.T) {
	t.Parallel()
	res, sc := sampleResult()
	row := parquet.FromEpisode(res, sc, "strict", sampleHashes)
	rec := parquet.NewRecord(memory.NewGoAllocator(), []parquet.Row{row})
	defer rec.Release()
	for _, tc := range []struct {
		version string
		added   []string
		clear   func(*parquet.Row)
	}{
		{"2", []string{"agent_tree_hash", "verifier_tree_hash", "observation_role"},
			func(r *parquet.Row) { r.AgentTreeHash, r.VerifierTreeHash, r.ObservationRole = "", "", "" }},
		{"4", []string{"observation_role"}, func(r *parquet.Row) { r.ObservationRole = "" }},
	} {
		var fields []arrow.Field
		var cols []arrow.Array
		for i, f := range rec.Schema().Fields() {
			if !slices.Contains(tc.added, f.Name) {
				fields, cols = append(fields, f), append(cols, rec.Column(i))
			}
		}
		if len(fields) != int(rec.NumCols())-len(tc.added) {
			t.Fatalf("version %s: the columns %v are not all in %v", tc.version, tc.added, rec.Schema())
		}
		old := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
		rows, err := parquet.RowsFromRecord(old)
		old.Release()
		if err != nil {
			t.Fatal(err)
		}
		want := row
		tc.clear(&want)
		if len(rows) != 1 || !reflect.DeepEqual(rows[0], want) {
			t.Fatalf("version-%s row read back as %+v, want %+v", tc.version, rows, want)
		}
		if rows[0].ObsRole() != "user" {
			t.Fatalf("version-%s row: observation role %q, want user", tc.version, rows[0].ObsRole())
		}
	}
}
