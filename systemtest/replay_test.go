package systemtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/verifier/verify"
)

// rewriteRun rewrites every Parquet file of a run in a directory store,
// applying edit to each row (as a hand edit of the files would).
func rewriteRun(t *testing.T, storeDir, runID string, edit func(*parquet.Row)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(storeDir, "trajectories", "run="+runID, "dataset=*", "*.parquet"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files for run %s: %v", runID, err)
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := parquet.Read(context.Background(), bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for i := range rows {
			edit(&rows[i])
		}
		var buf bytes.Buffer
		if err := parquet.Write(&buf, rows, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// changeLines returns the data lines of the change table.
func changeLines(out string) [][]string {
	var rows [][]string
	in := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "EPISODE"):
			in = true
		case in && strings.TrimSpace(l) != "":
			rows = append(rows, strings.Fields(l))
		}
	}
	return rows
}

// TestReplayDeterminism runs five MedCalc-Bench episodes with the reference
// policy, replays them (no change), tampers with one recorded stdout
// (replay reports exactly that), then pretends the rows were scored by an
// older verifier and checks that --write puts the re-scored rows in a new
// run, never into the old one.
func TestReplayDeterminism(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.Limit, f.Seed, f.RunID = 5, 7, "replay-ref"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		t.Fatal(err)
	}
	args := []string{"replay", "--store", f.Store, "--run", "replay-ref", "--data", f.Data, "--library", f.Library}

	// 1. An untouched run replays without a change.
	out, errOut, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("replay of an untouched run: %v\n%s%s", err, out, errOut)
	}
	if !strings.Contains(out, "5 episodes, 5 actions re-executed") || !strings.Contains(out, "no change") {
		t.Fatalf("replay output:\n%s", out)
	}

	// 2. One tampered stdout is reported, and nothing else.
	rows := readRun(t, ctx, f.Store, "replay-ref")
	victim := rows[2]
	rewriteRun(t, f.Store, "replay-ref", func(r *parquet.Row) {
		if r.EpisodeID == victim.EpisodeID {
			r.Turns[0].Stdout = "tampered\n"
		}
	})
	out, _, err = runCLI(t, args...)
	if !errors.Is(err, cli.ErrChanged) {
		t.Fatalf("replay of a tampered run: err %v, want errChanged\n%s", err, out)
	}
	got := changeLines(out)
	if len(got) != 1 {
		t.Fatalf("want exactly 1 change, got %d:\n%s", len(got), out)
	}
	if c := got[0]; c[0] != victim.EpisodeID || c[1] != victim.TaskID || c[2] != "0" || c[3] != "stdout" || c[4] != `"tampered\n"` {
		t.Fatalf("change %q, want episode %s turn 0 stdout", c, victim.EpisodeID)
	}
	if !strings.Contains(err.Error(), "1 change(s) in 1 episode(s)") {
		t.Fatalf("error %q", err)
	}
	// --episode restricts the replay to the named episode.
	out, _, err = runCLI(t, append(args, "--episode", rows[0].EpisodeID)...)
	if err != nil || !strings.Contains(out, "1 episodes, 1 actions") {
		t.Fatalf("replay of one untouched episode: %v\n%s", err, out)
	}

	// 3. Rows scored by another verifier version: --write re-scores them
	// into <run>-replay-<hash>, and the recorded run is left as it was.
	const old = "0.9.0+strict.0ldc0de0"
	rewriteRun(t, f.Store, "replay-ref", func(r *parquet.Row) {
		r.VerifierVersion = old
		if r.EpisodeID == victim.EpisodeID {
			r.Turns[0].Stdout = victim.Turns[0].Stdout
		}
	})
	out, errOut, err = runCLI(t, append(args, "--write")...)
	if err != nil {
		t.Fatalf("replay --write: %v\n%s%s", err, out, errOut)
	}
	cur := verify.VersionFor(verify.Strict)
	m := regexp.MustCompile(`run (\S+): 5 episode\(s\) re-scored by ` + regexp.QuoteMeta(cur)).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("replay --write output:\n%s", out)
	}
	// <run>-replay-<the version's rule-source hash>
	newRun := m[1]
	if want := "replay-ref-replay-" + cur[strings.LastIndex(cur, ".")+1:]; newRun != want || strings.Contains(newRun, "+") {
		t.Fatalf("new run id %q, want %q", newRun, want)
	}
	for _, r := range readRun(t, ctx, f.Store, "replay-ref") {
		if r.VerifierVersion != old {
			t.Fatalf("the recorded run was changed: version %q", r.VerifierVersion)
		}
	}
	re := readRun(t, ctx, f.Store, newRun)
	if len(re) != 5 {
		t.Fatalf("new run holds %d rows, want 5", len(re))
	}
	for _, r := range re {
		if r.RunID != newRun || r.VerifierVersion != cur || r.VerifierMode != "strict" || r.Outcome != "correct" || r.Reward != 1 {
			t.Fatalf("re-scored row: run %s version %s mode %s outcome %s reward %v", r.RunID, r.VerifierVersion, r.VerifierMode, r.Outcome, r.Reward)
		}
	}
	if _, err := os.Stat(filepath.Join(f.Store, "trajectories", "run="+newRun, "_manifest.json")); err != nil {
		t.Fatalf("new run has no manifest: %v", err)
	}
	// Writing again stores nothing twice.
	out, _, err = runCLI(t, append(args, "--write")...)
	if err != nil || !strings.Contains(out, "(0 file(s) written, 5 already there)") {
		t.Fatalf("second replay --write: %v\n%s", err, out)
	}
	if n := len(readRun(t, ctx, f.Store, newRun)); n != 5 {
		t.Fatalf("new run holds %d rows after a second write", n)
	}

	// 4. Rescore: the stored outputs re-scored, nothing run. An outcome and
	// reward stored wrong (as another label set or verifier would have
	// scored it) flips back, and only that episode's; a turn whose output
	// was stored capped is reported as needing a replay.
	rewriteRun(t, f.Store, "replay-ref", func(r *parquet.Row) {
		if r.EpisodeID == victim.EpisodeID {
			r.Outcome, r.Reward = "incorrect", 0
		}
		if r.EpisodeID == rows[0].EpisodeID {
			r.Turns[0].StdoutBytes = int64(len(r.Turns[0].Stdout)) + 1<<20
		}
	})
	rescore := append([]string{"rescore"}, args[1:]...)
	out, _, err = runCLI(t, rescore...)
	if !errors.Is(err, cli.ErrChanged) {
		t.Fatalf("rescore of a run with a wrong stored reward: err %v, want errChanged\n%s", err, out)
	}
	if !strings.Contains(out, "5 episodes, 0 actions re-executed") || !strings.Contains(out, "1 episode(s) re-scored from output stored capped") {
		t.Fatalf("rescore output:\n%s", out)
	}
	got = changeLines(out)
	if len(got) != 2 || got[0][0] != victim.EpisodeID || got[0][3] != "outcome" || got[0][5] != `"correct"` ||
		got[1][0] != victim.EpisodeID || got[1][3] != "reward" || got[1][5] != `"1"` {
		t.Fatalf("rescore changes %q, want the victim's outcome and reward back to correct and 1\n%s", got, out)
	}
}
