package train_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/trainer/train"
)

// trlFixtures is where TestTRLExport keeps the SFT export it builds, for the
// Python test that trains TRL on it (clients/python/tests/test_trl_sft_export.py).
const trlFixtures = "../../../clients/python/tests/testdata"

// TestTRLExport: sft/trl.jsonl holds one prompt/completion record per
// assistant turn with loss. A turn that failed to parse is never a
// completion, only context in the prompts after it; observations are never
// completions. The built sft.jsonl and trl.jsonl must equal the fixtures the
// Python test trains TRL on (MEDGYM_UPDATE_FIXTURES=1 rewrites them).
func TestTRLExport(t *testing.T) {
	rows := []parquet.Row{
		episode("a", "m", 0.6, "t1", 0, "correct", "!BADTURN one", "GOODTURN alpha", "!BADTURN two", "GOODTURN beta"),
		episode("a", "m", 0.6, "t2", 0, "correct", "GOODTURN gamma"),
		episode("a", "m", 0.6, "t3", 0, "incorrect", "!BADTURN three", "wrong answer"),
	}
	out := t.TempDir()
	res, err := train.Build(context.Background(), memSource{"r1": rows}, "mem", train.Filter{}, train.Options{}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.SFT) != 2 || len(res.SFTTRL) != 3 {
		t.Fatalf("%d SFT records, %d TRL records: want 2 and 3 (one per good assistant turn)", len(res.SFT), len(res.SFTTRL))
	}
	first := res.SFT[0]
	for i, r := range res.SFTTRL[:2] {
		if len(r.Completion) != 1 || r.Completion[0].Role != "assistant" || r.Completion[0] != first.Messages[r.Turn] ||
			first.LossMask[r.Turn] != 1 || len(r.Prompt) != r.Turn || r.EpisodeID != first.EpisodeID {
			t.Fatalf("record %d: %+v", i, r)
		}
		for j, m := range r.Prompt {
			if m != first.Messages[j] {
				t.Fatalf("record %d: prompt message %d is %+v, want %+v", i, j, m, first.Messages[j])
			}
		}
	}
	if got := res.SFTTRL[1].Prompt[6].Content; got != "!BADTURN two" {
		t.Fatalf("the masked turn before the last good one must stay its context, got %q", got)
	}
	if res.Manifest.Counts["sft_trl"] != 3 || len(res.VerifierTRL) != len(res.Verifier) {
		t.Fatalf("counts %v, %d verifier TRL records for %d", res.Manifest.Counts, len(res.VerifierTRL), len(res.Verifier))
	}
	for _, v := range res.VerifierTRL {
		if len(v.Prompt) != 1 || v.Prompt[0].Role != "user" || len(v.Completion) != 1 || (v.Completion[0].Content != "YES" && v.Completion[0].Content != "NO") {
			t.Fatalf("verifier record %+v", v)
		}
	}
	for _, f := range []string{"sft/trl.parquet", "rejection/trl.jsonl", "verifier/trl.jsonl"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}

	for _, f := range []string{"sft.jsonl", "trl.jsonl"} {
		got, err := os.ReadFile(filepath.Join(out, "sft", f))
		if err != nil {
			t.Fatal(err)
		}
		fixture := filepath.Join(trlFixtures, "export_"+f)
		if os.Getenv("MEDGYM_UPDATE_FIXTURES") == "1" {
			if err := os.WriteFile(fixture, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(fixture)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s differs from the export (MEDGYM_UPDATE_FIXTURES=1 go test -run TestTRLExport rewrites it): %v", fixture, err)
		}
	}
}
