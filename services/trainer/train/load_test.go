package train_test

import (
	"context"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/train"
)

type memSource map[string][]parquet.Row

func (m memSource) Runs(context.Context) ([]string, error) { return []string{"r1"}, nil }
func (m memSource) ReadRun(_ context.Context, id string) ([]parquet.Row, error) {
	return m[id], nil
}

// TestLoadLeavesOutInfraAndSandboxFailures: infra_failure, sandbox_error
// and abandoned (a client of the environment API went away) rows are
// dropped and counted unless IncludeInfra; policy failures stay.
func TestLoadLeavesOutInfraAndSandboxFailures(t *testing.T) {
	var rows []parquet.Row
	for i, o := range []string{"correct", "incorrect", "sandbox_error", "infra_failure", "timeout", "abandoned"} {
		r := parquet.Row{RunID: "r1", SchemaVersion: parquet.SchemaVersion, EpisodeID: string(rune('a' + i)), Outcome: o}
		if o == "correct" {
			r.Reward = 1
		}
		rows = append(rows, r)
	}
	src := memSource{"r1": rows}
	kept, _, st, err := train.Load(context.Background(), src, train.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 3 || st.InfraExcluded != 3 || st.RowsRead != 6 {
		t.Fatalf("kept %d rows, %d excluded of %d read; want 3, 3, 6", len(kept), st.InfraExcluded, st.RowsRead)
	}
	for _, r := range kept {
		if train.Infra(r.Outcome) {
			t.Fatalf("kept a %s row", r.Outcome)
		}
	}
	all, _, st, err := train.Load(context.Background(), src, train.Filter{IncludeInfra: true})
	if err != nil || len(all) != 6 || st.InfraExcluded != 0 {
		t.Fatalf("IncludeInfra kept %d, excluded %d, err %v", len(all), st.InfraExcluded, err)
	}
}
