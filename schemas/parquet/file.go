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
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	defer rr.Release()
	if err := checkColumns(rr.Schema()); err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
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
