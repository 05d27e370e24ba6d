package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
)

// TestReportLeaderboard: medgym report --leaderboard over two runs of two
// models writes the Markdown and CSV tables.
func TestReportLeaderboard(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "store"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct{ id, model, outcome string }{{"a", "m1", "correct"}, {"b", "m2", "incorrect"}} {
		rows := []parquet.Row{{RunID: run.id, EpisodeID: run.id + "-1", TaskID: "1", Dataset: "medcalcbench", Model: run.model,
			Outcome: run.outcome, SchemaVersion: parquet.SchemaVersion}}
		if _, err := st.Write(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := cmdReport(ctx, []string{"--store", filepath.Join(dir, "store"), "--leaderboard", "--out", filepath.Join(dir, "lb")}, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	md, err := os.ReadFile(filepath.Join(dir, "lb", "leaderboard.md"))
	if err != nil || !strings.Contains(string(md), "| m1 | 100.00 | 100.00 |  | 100.00 |") || !strings.Contains(string(md), "| m2 | 0.00 |") {
		t.Fatalf("leaderboard.md %v:\n%s", err, md)
	}
	if c, err := os.ReadFile(filepath.Join(dir, "lb", "leaderboard.csv")); err != nil || !strings.HasPrefix(string(c), "model,medcalcbench,") {
		t.Fatalf("leaderboard.csv %v:\n%s", err, c)
	}
}
