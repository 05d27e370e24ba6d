package meds

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Read streams the events of the MEDS Parquet file at path whose code keep
// accepts to fn, in file order: the subject, the time (UTC, from the
// file's microsecond timestamps), the code and the numeric value (ok is
// false when it is null). Rows with a null subject, time or code are
// skipped. It is a tasks.MEDSReader.
func Read(ctx context.Context, path string, keep func(code string) bool,
	fn func(subject int64, t time.Time, code string, value float32, ok bool) error) error {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return fmt.Errorf("read meds: %w", err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("read meds %s: %w", path, err)
	}
	sc, err := fr.Schema()
	if err != nil {
		return fmt.Errorf("read meds %s: %w", path, err)
	}
	var cols []int
	for _, name := range []string{"subject_id", "time", "code", "value"} {
		idx := sc.FieldIndices(name)
		if len(idx) != 1 {
			return fmt.Errorf("read meds %s: no column %q", path, name)
		}
		cols = append(cols, idx[0])
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return fmt.Errorf("read meds %s: %w", path, err)
	}
	defer rr.Release()
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec := rr.RecordBatch()
		subj, ok1 := rec.Column(0).(*array.Int64)
		ts, ok2 := rec.Column(1).(*array.Timestamp)
		code, ok3 := rec.Column(2).(*array.String)
		val, ok4 := rec.Column(3).(*array.Float32)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return fmt.Errorf("read meds %s: want int64 subject_id, timestamp time, string code, float32 value; have %s", path, rec.Schema())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if code.IsNull(i) || subj.IsNull(i) || ts.IsNull(i) || !keep(code.Value(i)) {
				continue
			}
			t := time.UnixMicro(int64(ts.Value(i))).UTC()
			if err := fn(subj.Value(i), t, code.Value(i), val.Value(i), !val.IsNull(i)); err != nil {
				return err
			}
		}
	}
	if err := rr.Err(); err != nil {
		return fmt.Errorf("read meds %s: %w", path, err)
	}
	return nil
}
