package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	pqschema "github.com/apache/arrow-go/v18/parquet/schema"
)

// DefaultRowGroupLength is the row-group length Write uses when none is
// given. Trajectory rows are large (every turn's text), so groups are far
// shorter than arrow-go's default of 64 Mi rows.
const DefaultRowGroupLength = 10_000

// ReaderAtSeeker is what Read needs of a file: *os.File and *bytes.Reader
// have it.
type ReaderAtSeeker = pq.ReaderAtSeeker

// Write writes rows as one zstd-compressed Parquet file to w, in row groups
// of at most rowGroupLength rows (≤ 0: DefaultRowGroupLength). The Arrow
// schema, with SchemaVersion in its metadata, is stored in the file.
func Write(w io.Writer, rows []Row, rowGroupLength int64) error {
	if rowGroupLength <= 0 {
		rowGroupLength = DefaultRowGroupLength
	}
	props := pq.NewWriterProperties(
		pq.WithCompression(compress.Codecs.Zstd),
		pq.WithMaxRowGroupLength(rowGroupLength),
		pq.WithCreatedBy("medgym trajectory schema "+SchemaVersion),
	)
	fw, err := pqarrow.NewFileWriter(schema, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return fmt.Errorf("write parquet: %w", err)
	}
	for start := 0; start < len(rows); start += int(rowGroupLength) {
		end := min(start+int(rowGroupLength), len(rows))
		rec := NewRecord(memory.DefaultAllocator, rows[start:end])
		err = fw.Write(rec)
		rec.Release()
		if err != nil {
			_ = fw.Close()
			return fmt.Errorf("write parquet: %w", err)
		}
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("write parquet: close: %w", err)
	}
	return nil
}

// Read reads every row of a trajectory Parquet file.
func Read(ctx context.Context, r ReaderAtSeeker) ([]Row, error) {
	return ReadColumns(ctx, r, nil)
}

// ScoringColumns are the columns a re-score reads (see ReadColumns): the
// episode's identity and score, its final answer and, of each turn, what
// the verifier looks at; not the messages, the model's text, the
// observations or the token data, which are most of a row.
var ScoringColumns = []string{"run_id", "episode_id", "task_id", "dataset", "category", "split", "sample_index", "attempt",
	"policy", "model", "policy_version", "temperature", "reward", "outcome", "termination", "num_turns", "final_answer",
	"error", "started_at", "finished_at", "verifier_version", "verifier_mode", "schema_version", "agent_tree_hash",
	"verifier_tree_hash", "observation_role", "label_set",
	"turns.index", "turns.action", "turns.params_json", "turns.parse_error", "turns.exec_status", "turns.exit_code",
	"turns.stdout", "turns.stderr", "turns.truncated", "turns.accepted", "turns.files_json", "turns.stdout_bytes",
	"turns.stderr_bytes"}

// ReadColumns reads the named columns of every row of a trajectory file:
// top-level columns by name, turn fields as "turns.<field>"; the other
// fields of the rows stay zero (a turn keeps its place in the list). A
// name the file lacks is left out, as Read leaves out a column added
// after the file was written; the columns every version has must all be
// in the file (checkColumns). Nil cols reads every column (Read).
func ReadColumns(ctx context.Context, r ReaderAtSeeker, cols []string) ([]Row, error) {
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	full, err := fr.Schema()
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	if err := checkColumns(full); err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	var leaves []int // nil: all
	if cols != nil {
		if leaves = leafIndices(pf.MetaData().Schema, cols); len(leaves) == 0 {
			return nil, fmt.Errorf("read parquet: none of the columns %v", cols)
		}
	}
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	defer rr.Release()
	var rows []Row
	for rr.Next() {
		got, err := RowsFromRecord(rr.RecordBatch())
		if err != nil {
			return nil, fmt.Errorf("read parquet: %w", err)
		}
		rows = append(rows, got...)
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	return rows, nil
}

// leafIndices returns the Parquet leaf columns of cols (top-level names,
// or "turns.<field>").
func leafIndices(sch *pqschema.Schema, cols []string) []int {
	want := make(map[string]bool, len(cols))
	for _, c := range cols {
		want[c] = true
	}
	var leaves []int
	for i := range sch.NumColumns() {
		// Leaf paths: "reward", "turns.list.element.stdout",
		// "turns.list.element.prompt_token_ids.list.element".
		path := sch.Column(i).ColumnPath()
		name := path[0]
		if name == "turns" && len(path) >= 4 {
			name = "turns." + path[3]
		}
		if want[name] {
			leaves = append(leaves, i)
		}
	}
	return leaves
}

// ReadEpisodeIDs reads only the episode_id column of a trajectory file,
// which is what deduplication needs.
func ReadEpisodeIDs(ctx context.Context, r ReaderAtSeeker) ([]string, error) {
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, fmt.Errorf("read episode ids: %w", err)
	}
	defer pf.Close()
	idx := pf.MetaData().Schema.ColumnIndexByName("episode_id")
	if idx < 0 {
		return nil, errors.New("read episode ids: file has no episode_id column")
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("read episode ids: %w", err)
	}
	rr, err := fr.GetRecordReader(ctx, []int{idx}, nil)
	if err != nil {
		return nil, fmt.Errorf("read episode ids: %w", err)
	}
	defer rr.Release()
	var ids []string
	for rr.Next() {
		col, ok := rr.RecordBatch().Column(0).(stringer)
		if !ok {
			return nil, fmt.Errorf("read episode ids: column type %s, want string", rr.RecordBatch().Column(0).DataType())
		}
		for i := range col.Len() {
			ids = append(ids, col.Value(i))
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read episode ids: %w", err)
	}
	return ids, nil
}
