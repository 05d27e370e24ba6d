package store_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
)

// row builds a full row with a turn that carries token ids and logprobs.
func row(run, ep, dataset, outcome string) parquet.Row {
	temp := 0.6
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC).Add(time.Duration(len(ep)) * time.Microsecond)
	return parquet.Row{
		RunID: run, EpisodeID: ep, TaskID: "task-" + ep, Dataset: dataset, Category: "ehr", Split: "test",
		SampleIndex: 1, Attempt: 0, Policy: "openai", Model: "m", PolicyVersion: 2, Temperature: &temp,
		Reward: map[bool]float64{true: 1}[outcome == "correct"], Outcome: outcome, Termination: "accepted",
		NumTurns: 1, FinalAnswer: "42", StartedAt: start, FinishedAt: start.Add(time.Second),
		VerifierVersion: "v1", VerifierMode: "strict", SchemaVersion: parquet.SchemaVersion,
		PromptTokens: 10, CompletionTokens: 3,
		Messages: []parquet.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}},
		Turns: []parquet.Turn{{Index: 0, RawText: "a", Action: "validate_code", ParamsJSON: `{"code":"print(42)"}`,
			Observation: "42", ExecStatus: "ok", Stdout: "42\n", Accepted: true, DurationMS: 5, LLMLatencyMS: 7,
			PromptTokens: 10, CompletionTokens: 3, PromptTokenIDs: []int32{1, 2}, CompletionTokenIDs: []int32{3, 4, 5},
			CompletionLogprobs: []float32{-0.1, -0.2, -0.3}}},
	}
}

func byEpisode(rows []parquet.Row) map[string]parquet.Row {
	m := map[string]parquet.Row{}
	for _, r := range rows {
		m[r.EpisodeID] = r
	}
	return m
}

// testStore is the conformance suite every backend passes. open returns a
// new Store on the same underlying storage each time it is called.
func testStore(t *testing.T, open func(t *testing.T) *store.Store) {
	ctx := t.Context()
	st := open(t)

	nulls := parquet.Row{RunID: "r1", EpisodeID: "e-null", Dataset: "mimic", Outcome: "infra_failure",
		Error: "endpoint down"}
	in := []parquet.Row{row("r1", "e1", "mimic", "correct"), row("r1", "e2", "eicu", "incorrect"),
		row("r1", "e3", "mimic", "incorrect"), nulls, row("r2", "e1", "mimic", "correct")}
	keys, err := st.Write(ctx, in)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	// One file per (run, dataset): r1/mimic, r1/eicu, r2/mimic.
	if len(keys) != 3 {
		t.Fatalf("keys = %v, want 3 files", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "trajectories/run=r") || !strings.Contains(k, "/dataset=") ||
			!strings.Contains(k, "/part-") || !strings.HasSuffix(k, ".parquet") {
			t.Errorf("key %q does not follow the hive layout", k)
		}
	}

	got, err := st.ReadRun(ctx, "r1")
	if err != nil {
		t.Fatalf("read run: %v", err)
	}
	if len(got) != 4 {
		t.Fatalf("read %d rows of r1, want 4", len(got))
	}
	gm := byEpisode(got)
	for _, want := range in[:4] {
		if !reflect.DeepEqual(gm[want.EpisodeID], want) {
			t.Errorf("episode %s:\n got  %+v\n want %+v", want.EpisodeID, gm[want.EpisodeID], want)
		}
	}
	if gm["e-null"].Temperature != nil || gm["e-null"].Turns != nil {
		t.Errorf("null row read back with values: %+v", gm["e-null"])
	}

	// Same Store: stored episodes are skipped, new ones written.
	keys, err = st.Write(ctx, []parquet.Row{row("r1", "e1", "mimic", "incorrect"), row("r1", "e4", "mimic", "correct"),
		row("r1", "e4", "mimic", "incorrect")})
	if err != nil {
		t.Fatalf("second write: %v", err)
	}
	if len(keys) != 1 {
		t.Errorf("second write keys = %v, want one file", keys)
	}

	// A new Store (a restarted process) loads stored ids from the files.
	st2 := open(t)
	for _, ep := range []string{"e1", "e2", "e3", "e4", "e-null"} {
		ok, err := st2.Has(ctx, "r1", ep)
		if err != nil || !ok {
			t.Errorf("has(r1, %s) = %v, %v; want true", ep, ok, err)
		}
	}
	if ok, err := st2.Has(ctx, "r1", "e5"); err != nil || ok {
		t.Errorf("has(r1, e5) = %v, %v; want false", ok, err)
	}
	keys, err = st2.Write(ctx, []parquet.Row{row("r1", "e2", "eicu", "correct"), row("r2", "e1", "mimic", "incorrect")})
	if err != nil || len(keys) != 0 {
		t.Errorf("rewrite of stored episodes: keys %v, err %v; want nothing written", keys, err)
	}

	got, err = st2.ReadRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	gm = byEpisode(got)
	if len(got) != 5 || gm["e1"].Outcome != "correct" || gm["e4"].Outcome != "correct" {
		t.Errorf("after dedupe: %d rows, e1 %q, e4 %q; want 5 rows, first writes kept", len(got), gm["e1"].Outcome, gm["e4"].Outcome)
	}

	runs, err := st2.Runs(ctx)
	if err != nil || !slices.Equal(runs, []string{"r1", "r2"}) {
		t.Errorf("runs = %v, %v; want [r1 r2]", runs, err)
	}
	if rows, err := st2.ReadRun(ctx, "nope"); err != nil || len(rows) != 0 {
		t.Errorf("read of an unknown run = %v, %v; want empty", rows, err)
	}

	// Manifest.
	if _, err := st2.ReadManifest(ctx, "r1"); !errors.Is(err, store.ErrNoManifest) {
		t.Errorf("read missing manifest: %v, want ErrNoManifest", err)
	}
	m, err := store.NewManifest("r1", got, map[string]any{"samples": 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.WriteManifest(ctx, "r1", m); err != nil {
		t.Fatalf("write manifest: %v", err)
	}
	back, err := st.ReadManifest(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var cfg bytes.Buffer
	if err := json.Compact(&cfg, back.Config); err != nil {
		t.Fatalf("manifest config is not JSON: %v", err)
	}
	wantCounts := map[string]map[string]int{"mimic": {"correct": 2, "incorrect": 1, "infra_failure": 1}, "eicu": {"incorrect": 1}}
	if back.Total != 5 || !reflect.DeepEqual(back.Counts, wantCounts) || back.SchemaVersion != parquet.SchemaVersion ||
		cfg.String() != `{"samples":2}` || back.WrittenAt.IsZero() {
		t.Errorf("manifest = %+v", back)
	}
	// The manifest must not be read as data.
	all, err := st.ReadRun(ctx, "r1")
	if err != nil || len(all) != 5 {
		t.Errorf("read run after manifest: %d rows, %v", len(all), err)
	}
	// ScanRun gives the same episodes, file by file, with only the columns
	// asked for.
	scanned := map[string]parquet.Row{}
	nfiles := 0
	err = st.ScanRun(ctx, "r1", parquet.ScoringColumns, func(rows []parquet.Row) error {
		nfiles++
		for _, r := range rows {
			if _, dup := scanned[r.EpisodeID]; dup {
				t.Errorf("scan gave episode %s twice", r.EpisodeID)
			}
			scanned[r.EpisodeID] = r
		}
		return nil
	})
	if err != nil || nfiles < 2 || len(scanned) != len(all) {
		t.Errorf("scan: %d files, %d episodes, %v; want %d episodes", nfiles, len(scanned), err, len(all))
	}
	for _, r := range all {
		if g := scanned[r.EpisodeID]; g.Outcome != r.Outcome || g.Reward != r.Reward || g.Messages != nil || len(g.Turns) != len(r.Turns) {
			t.Errorf("scanned %s: %+v, read %+v", r.EpisodeID, g, r)
		}
	}
	stop := errors.New("stop")
	if err := st.ScanRun(ctx, "r1", nil, func([]parquet.Row) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("scan with a failing callback: %v", err)
	}

	// CopyLocal mirrors the keys.
	dir := t.TempDir()
	if err := st.CopyLocal(ctx, "r1", dir); err != nil {
		t.Fatalf("copy local: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "trajectories", "run=r1", "dataset=*", "part-*.parquet"))
	if len(files) != 3 {
		t.Errorf("copied %d parquet files of r1, want 3", len(files))
	}
	if _, err := os.Stat(filepath.Join(dir, "trajectories", "run=r1", "_manifest.json")); err != nil {
		t.Errorf("manifest not copied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "trajectories", "run=r2")); err == nil {
		t.Error("copy of r1 also copied r2")
	}

	if err := st.Ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
}

// testCreate is the conformance of the create-only write that keeps an
// episode in one file: of concurrent creates of one key exactly one lands
// (whole), the others fail with ErrExists and change nothing; a create
// over any existing object fails the same way.
func testCreate(t *testing.T, st *store.Store) {
	ctx := t.Context()
	const key, writers = "trajectories/run=create/dataset=mimic/part-race.parquet", 8
	errs := make(chan error, writers)
	for i := range writers {
		go func() { errs <- store.Create(ctx, st, key, []byte(fmt.Sprintf("writer %d", i))) }()
	}
	won := 0
	for range writers {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrExists):
			t.Errorf("losing create: %v, want ErrExists", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent creates of one key succeeded, want exactly 1", won, writers)
	}
	got, err := store.Get(ctx, st, key)
	if err != nil || !strings.HasPrefix(string(got), "writer ") {
		t.Fatalf("created object = %q, %v", got, err)
	}
	if err := store.Create(ctx, st, key, []byte("late")); !errors.Is(err, store.ErrExists) {
		t.Errorf("create of an existing key: %v, want ErrExists", err)
	}
	if again, _ := store.Get(ctx, st, key); !bytes.Equal(again, got) {
		t.Errorf("a refused create changed the object: %q, was %q", again, got)
	}
}

// testClaims: two writers (two verifiers) sharing claims store every
// episode once, though each learnt the run's stored episodes before the
// other wrote: redelivered rows already stored by the other are skipped,
// a claimed file its writer never created is created by the one that
// meets the claim (and refused to its writer later), and a claim on a
// file that exists without the episode moves to a new file. Counted over
// every file, not through ReadRun's dedupe.
func testClaims(t *testing.T, open func(t *testing.T) *store.Store) {
	ctx := t.Context()
	const run = "claims"
	cl := store.NewMemClaims()
	a, b := open(t).WithClaims(cl), open(t).WithClaims(cl)
	r := func(ep, outcome string) parquet.Row { return row(run, ep, "mimic", outcome) }
	mustWrite := func(s *store.Store, want int, rows ...parquet.Row) []string {
		t.Helper()
		keys, err := s.Write(ctx, rows)
		if err != nil || len(keys) != want {
			t.Fatalf("write %d rows: keys %v, %v; want %d files", len(rows), keys, err, want)
		}
		return keys
	}
	// Each writer touches the run first, so each knows its stored episodes
	// as of now (a Store without claims would store e2 and e3 twice below).
	mustWrite(a, 1, r("e0", "correct"))
	mustWrite(b, 1, r("e1", "correct"))
	// a stores e2 and e3 and cannot ack them; b gets them again, with e4.
	mustWrite(a, 1, r("e2", "correct"), r("e3", "correct"))
	e4file := mustWrite(b, 1, r("e2", "incorrect"), r("e3", "incorrect"), r("e4", "correct"))[0]

	// e5 was claimed by a writer that stopped before creating its file.
	stopped := "trajectories/run=claims/dataset=mimic/part-stopped.parquet"
	if cur, _, _ := cl.Claim(ctx, run, "e5", stopped); cur != stopped {
		t.Fatalf("claim e5: %s", cur)
	}
	if keys := mustWrite(b, 1, r("e5", "correct")); keys[0] != stopped {
		t.Fatalf("e5 written to %s, want its claimed file %s", keys[0], stopped)
	}
	mustWrite(a, 0, r("e5", "incorrect")) // the stopped writer comes back
	// e6's claim names a file that exists without it: the claim moves.
	if _, _, err := cl.Claim(ctx, run, "e6", e4file); err != nil {
		t.Fatal(err)
	}
	moved := mustWrite(a, 1, r("e6", "correct"))[0]
	if moved == e4file || cl.Part(run, "e6") != moved {
		t.Fatalf("e6 written to %s, claim %s; want a new file, claimed", moved, cl.Part(run, "e6"))
	}

	dir := t.TempDir()
	if err := a.CopyLocal(ctx, run, dir); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "trajectories", "run="+run, "*", "*.parquet"))
	count := map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := parquet.Read(ctx, fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			count[r.EpisodeID]++
			if r.EpisodeID != "e0" && r.EpisodeID != "e1" && r.Outcome != "correct" {
				t.Errorf("%s: stored the second writer's row (outcome %s), want the first's", r.EpisodeID, r.Outcome)
			}
		}
	}
	want := map[string]int{"e0": 1, "e1": 1, "e2": 1, "e3": 1, "e4": 1, "e5": 1, "e6": 1}
	if !reflect.DeepEqual(count, want) {
		t.Errorf("rows per episode over every file = %v, want each once", count)
	}
}

func TestDirStore(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "store")
	open := func(t *testing.T) *store.Store {
		st, err := store.Open(t.Context(), root, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	testStore(t, open)
	testCreate(t, open(t))
	testClaims(t, open)
	// Nothing temporary is left behind.
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

func TestWriteRejectsBadTokens(t *testing.T) {
	t.Parallel()
	st, err := store.Open(t.Context(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []parquet.Row{
		{RunID: "../x", EpisodeID: "e", Dataset: "d"},
		{RunID: "r", EpisodeID: "", Dataset: "d"},
		{RunID: "r", EpisodeID: "e", Dataset: "a/b"},
	} {
		if _, err := st.Write(t.Context(), []parquet.Row{r}); err == nil {
			t.Errorf("write of %+v: want an error", r)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"", "gs://bucket/x", "s3:///nobucket"} {
		if _, err := store.Open(t.Context(), url, store.Options{Endpoint: "127.0.0.1:1"}); err == nil {
			t.Errorf("open %q: want an error", url)
		}
	}
}

func TestOpenUnreachableS3(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Port 1 on loopback refuses connections.
	_, err := store.Open(ctx, "s3://bucket/p", store.Options{Endpoint: "http://127.0.0.1:1", AccessKey: "a", SecretKey: "b", MaxRetries: 1})
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"127.0.0.1:1", "unreachable", "scripts/minio.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// randomRows makes rows whose text does not compress (base64 of random
// bytes: about 6 bits per character after zstd), for large files.
func randomRows(run string, n, textBytes int) []parquet.Row {
	rng := rand.NewChaCha8([32]byte{1})
	rows := make([]parquet.Row, n)
	raw := make([]byte, textBytes*3/4)
	for i := range rows {
		_, _ = rng.Read(raw)
		rows[i] = row(run, fmt.Sprintf("big-%d", i), "mimic", "correct")
		rows[i].Turns[0].Stdout = base64.StdEncoding.EncodeToString(raw)
	}
	return rows
}
