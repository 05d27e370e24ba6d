package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
)

// benchRow is an episode of six code turns with token ids and logprobs,
// about the size of a MedCalc or EHR trajectory.
func benchRow(run string, i int) parquet.Row {
	r := row(run, fmt.Sprintf("e%06d", i), "mimic_iii", "correct")
	code := strings.Repeat("df = pd.read_csv('/data/admissions.csv')\n", 12)
	out := strings.Repeat("subject_id,hadm_id,admittime\n", 40)
	ids := make([]int32, 300)
	lps := make([]float32, 300)
	for k := range ids {
		ids[k], lps[k] = int32(k*7+i), -float32(k%13)/10
	}
	r.Turns = nil
	for k := range 6 {
		r.Turns = append(r.Turns, parquet.Turn{Index: int32(k), RawText: code, Action: "validate_code",
			ParamsJSON: `{"code":"` + code + `"}`, Observation: out, ExecStatus: "ok", Stdout: out,
			PromptTokens: 2000, CompletionTokens: 300, CompletionTokenIDs: ids, CompletionLogprobs: lps})
	}
	r.NumTurns = 6
	return r
}

// BenchmarkWrite stores 256 episodes per iteration in a directory store,
// in one Write (what the verifier's Batcher does) or one Write per episode.
// The ratio of their rows/s is the Batcher's gain.
func BenchmarkWrite(b *testing.B) {
	for _, batch := range []int{256, 1} {
		b.Run(fmt.Sprintf("batch-%d", batch), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			s, err := store.Open(ctx, dir, store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			const perIter = 256
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				run := fmt.Sprintf("r%d", it)
				for a := 0; a < perIter; a += batch {
					rows := make([]parquet.Row, 0, batch)
					for i := a; i < a+batch; i++ {
						rows = append(rows, benchRow(run, i))
					}
					if _, err := s.Write(ctx, rows); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*perIter)/b.Elapsed().Seconds(), "rows/s")
			var size int64
			_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					size += fi.Size()
				}
				return nil
			})
			b.ReportMetric(float64(size)/float64(b.N*perIter), "disk-B/row")
		})
	}
}
