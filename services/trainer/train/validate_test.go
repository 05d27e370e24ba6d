package train_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/train"
	"github.com/medgym/medgym/store"
)

// storeWith writes one run of rows through the store package (real
// zstd Parquet files in a directory store) and returns the store and the
// run's one file.
func storeWith(t *testing.T, run string, rows []parquet.Row) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "run="+run, "*.parquet"))
	if len(files) == 0 {
		files, _ = filepath.Glob(filepath.Join(dir, "*", "run="+run, "*", "*.parquet"))
	}
	if len(files) != 1 {
		t.Fatalf("run %s: files %v, want one", run, files)
	}
	return st, files[0]
}

// storable is episode with an episode id the store accepts.
func storable(run, task string, sample int32, outcome string, actions ...string) parquet.Row {
	r := episode(run, "m", 0.7, task, sample, outcome, actions...)
	r.EpisodeID = run + "-" + task
	return r
}

// TestLoadRefusesInvalidRows: rows a trainer must not learn from fail the
// read with an error that names the file, the episode and the column, for
// Load (every builder: SFT, preference, GRPO) and ReadRun (the online
// loop). Before, a NaN reward failed later with an error naming neither,
// and the others passed silently. The same rows, valid, load (control).
func TestLoadRefusesInvalidRows(t *testing.T) {
	cases := []struct {
		name, col, problem string
		spoil              func(r *parquet.Row)
	}{
		{"NaN reward", "reward", "not a finite number", func(r *parquet.Row) { r.Reward = math.NaN() }},
		{"infinite reward", "reward", "not a finite number", func(r *parquet.Row) { r.Reward = math.Inf(1) }},
		{"correct with a huge negative reward", "reward", "outside", func(r *parquet.Row) { r.Reward = -1e9 }},
		{"correct with a huge positive reward", "reward", "outside", func(r *parquet.Row) { r.Reward = 2e6 }},
		{"negative prompt tokens", "prompt_tokens", "negative", func(r *parquet.Row) { r.PromptTokens = -5 }},
		{"negative turn tokens", "turns[0].completion_tokens", "negative", func(r *parquet.Row) { r.Turns[0].CompletionTokens = -1 }},
		{"schema version 99", "schema_version", `"99"`, func(r *parquet.Row) { r.SchemaVersion = "99" }},
		{"no schema version", "schema_version", `""`, func(r *parquet.Row) { r.SchemaVersion = "" }},
		{"50 MB turn", "turns[0].observation", "bytes, more than", func(r *parquet.Row) { r.Turns[0].Observation = strings.Repeat("x", 50<<20) }},
		{"NaN logprob", "turns[0].completion_logprobs", "not a finite number", func(r *parquet.Row) {
			r.Turns[0].CompletionLogprobs = []float32{-0.1, float32(math.NaN())}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			good := storable("rv", "t1", 0, "correct", "a", "b")
			bad := storable("rv", "t2", 1, "correct", "a", "b")
			c.spoil(&bad)
			st, file := storeWith(t, "rv", []parquet.Row{good, bad})
			_, _, _, err := train.Load(context.Background(), st, train.Filter{Runs: []string{"rv"}})
			if err == nil {
				t.Fatal("Load accepted the row")
			}
			for _, want := range []string{filepath.Base(file), bad.EpisodeID, "column " + c.col + ":", c.problem} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not say %q", err, want)
				}
			}
			if _, err := train.ReadRun(context.Background(), st, "rv"); err == nil || !strings.Contains(err.Error(), bad.EpisodeID) {
				t.Fatalf("ReadRun: %v", err)
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		rows := []parquet.Row{storable("rv", "t1", 0, "correct", "a", "b"), storable("rv", "t2", 1, "incorrect", "a"),
			storable("rv", "t3", 0, "incorrect", "a"), storable("rv", "t4", 0, "correct", "a")}
		rows[1].Reward = -0.5  // a wrong-answer penalty
		rows[2].Reward = -1157 // RS(N): the penalty is the test set's size
		rows[3].Reward = 0     // a graded prediction task at accuracy 0 (--graded-ml)
		st, _ := storeWith(t, "rv", rows)
		got, _, _, err := train.Load(context.Background(), st, train.Filter{Runs: []string{"rv"}})
		if err != nil || len(got) != 4 {
			t.Fatalf("valid rows: %d, %v", len(got), err)
		}
	})
}

// TestLoadRefusesFileWithoutReward: a Parquet file without the reward
// column (written with arrow-go, every other column present) used to read
// back as reward 0 for every row; now the read fails and names the file
// and the column.
func TestLoadRefusesFileWithoutReward(t *testing.T) {
	st, file := storeWith(t, "rw", []parquet.Row{storable("rw", "t1", 0, "correct", "a")})
	rows := []parquet.Row{storable("rw", "t1", 0, "correct", "a")}
	rec := parquet.NewRecord(memory.DefaultAllocator, rows)
	defer rec.Release()
	var fields []arrow.Field
	var cols []arrow.Array
	for i, f := range rec.Schema().Fields() {
		if f.Name != "reward" {
			fields = append(fields, f)
			cols = append(cols, rec.Column(i))
		}
	}
	md := rec.Schema().Metadata()
	sch := arrow.NewSchema(fields, &md)
	out := array.NewRecordBatch(sch, cols, rec.NumRows())
	defer out.Release()
	f, err := os.Create(file) // replaces the store's file
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(sch, f, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(out); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = train.Load(context.Background(), st, train.Filter{Runs: []string{"rw"}})
	if err == nil || !strings.Contains(err.Error(), filepath.Base(file)) || !strings.Contains(err.Error(), "no column reward") {
		t.Fatalf("Load of a file without reward: %v", err)
	}
}
