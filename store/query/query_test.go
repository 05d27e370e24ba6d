package query_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/query"
)

func rowOf(ep, dataset string, reward float64, turns int) parquet.Row {
	r := parquet.Row{RunID: "run1", EpisodeID: ep, Dataset: dataset, Outcome: "correct", Reward: reward,
		SchemaVersion: parquet.SchemaVersion, StartedAt: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	for i := range turns {
		r.Turns = append(r.Turns, parquet.Turn{Index: int32(i), Action: "validate_code",
			CompletionTokenIDs: []int32{int32(i), 9}, CompletionLogprobs: []float32{-0.5, -1}})
	}
	r.NumTurns = int32(turns)
	return r
}

func TestQueryOverStore(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(ctx, []parquet.Row{rowOf("a", "mimic", 1, 2), rowOf("b", "mimic", 0, 1), rowOf("c", "eicu", 0.5, 3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(ctx, []parquet.Row{rowOf("d", "eicu", 1, 1)}); err != nil {
		t.Fatal(err)
	}

	cols, rows, err := query.Query(ctx, dir, `SELECT dataset, avg(reward) AS mean, count(*) AS n, any_value(run) AS run
		FROM trajectories GROUP BY dataset ORDER BY dataset`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cols, ",") != "dataset,mean,n,run" {
		t.Errorf("cols = %v", cols)
	}
	if len(rows) != 2 {
		t.Fatalf("rows = %v", rows)
	}
	// eicu: (0.5+1)/2, mimic: (1+0)/2; the hive key run is a column.
	if rows[0][0] != "eicu" || rows[0][1] != 0.75 || rows[0][2] != int64(2) || rows[0][3] != "run1" ||
		rows[1][0] != "mimic" || rows[1][1] != 0.5 || rows[1][2] != int64(2) {
		t.Errorf("rows = %v", rows)
	}

	_, rows, err = query.Query(ctx, dir, `SELECT count(*), sum(t.completion_token_ids[1]), min(t.completion_logprobs[2])
		FROM (SELECT unnest(turns) AS t FROM trajectories)`)
	if err != nil {
		t.Fatal(err)
	}
	// 7 turns in all; first completion ids are the turn indexes: 0+1 + 0 + 0+1+2 + 0 = 4.
	if rows[0][0] != int64(7) || Format(rows[0][1]) != "4" || Format(rows[0][2]) != "-1" {
		t.Errorf("unnest: %v", rows[0])
	}

	var tbl, csvb bytes.Buffer
	cols, rows, err = query.Query(ctx, dir, `SELECT episode_id, temperature, reward FROM trajectories ORDER BY episode_id`)
	if err != nil {
		t.Fatal(err)
	}
	if err := query.WriteTable(&tbl, cols, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(tbl.String()), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "episode_id") || !strings.Contains(lines[2], "NULL") {
		t.Errorf("table:\n%s", tbl.String())
	}
	if err := query.WriteCSV(&csvb, cols, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(csvb.String(), "episode_id,temperature,reward\na,,1\n") {
		t.Errorf("csv:\n%s", csvb.String())
	}
}

func TestQueryErrors(t *testing.T) {
	if _, _, err := query.Query(t.Context(), t.TempDir(), "SELECT 1"); err == nil || !strings.Contains(err.Error(), "no trajectory files") {
		t.Errorf("empty dir: %v", err)
	}
}

// Format is shorthand for query.Format in assertions.
func Format(v any) string { return query.Format(v) }
