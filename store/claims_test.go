package store

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store/miniotest"
)

// pausedBackend stops its first create until resume is closed, as a
// verifier paused (SIGSTOP, a long GC, a slow disk) between claiming its
// rows and creating their file would.
type pausedBackend struct {
	backend
	paused chan struct{} // closed when the first create is held
	resume chan struct{}
	first  bool
}

func (p *pausedBackend) create(ctx context.Context, key string, data []byte) error {
	if !p.first {
		p.first = true
		close(p.paused)
		<-p.resume
	}
	return p.backend.create(ctx, key, data)
}

// testPausedAfterClaim: writer a claims e1 and e2 for its file and stops
// before creating it; the redelivered e1 reaches writer b, which creates
// a's file with e1. When a resumes, its create is refused: e1 counts as
// stored (b's row), and e2, which the file lacks, moves to a new file. Each
// episode is in exactly one file.
func testPausedAfterClaim(t *testing.T, be backend) {
	ctx := t.Context()
	cl := NewMemClaims()
	pb := &pausedBackend{backend: be, paused: make(chan struct{}), resume: make(chan struct{})}
	a, b := newStore("a", pb).WithClaims(cl), newStore("b", be).WithClaims(cl)
	row := func(ep string) parquet.Row {
		return parquet.Row{RunID: "paused", EpisodeID: ep, Dataset: "ds", Outcome: "correct", SchemaVersion: parquet.SchemaVersion}
	}
	type result struct {
		keys []string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		keys, err := a.Write(ctx, []parquet.Row{row("e1"), row("e2")})
		done <- result{keys, err}
	}()
	<-pb.paused
	claimed := cl.Part("paused", "e1")
	keys, err := b.Write(ctx, []parquet.Row{row("e1")})
	if err != nil || len(keys) != 1 || keys[0] != claimed {
		t.Fatalf("b's write of the redelivered e1: %v, %v; want the file a claimed, %s", keys, err, claimed)
	}
	close(pb.resume)
	res := <-done
	if res.err != nil || len(res.keys) != 1 || res.keys[0] == claimed {
		t.Fatalf("a's write after resuming: %v, %v; want one new file (for e2)", res.keys, res.err)
	}
	if got := cl.Part("paused", "e2"); got != res.keys[0] {
		t.Errorf("e2 claimed for %s, written to %s", got, res.keys[0])
	}
	keys, err = newStore("reader", be).partKeys(ctx, "paused")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, k := range keys {
		data, err := be.get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := parquet.ReadEpisodeIDs(ctx, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			count[id]++
		}
	}
	if len(keys) != 2 || count["e1"] != 1 || count["e2"] != 1 {
		t.Errorf("files %v hold %v; want e1 and e2 once each in two files", keys, count)
	}
	// a retry of a's rows (its messages redelivered to it) writes nothing.
	if keys, err := a.Write(ctx, []parquet.Row{row("e1"), row("e2")}); err != nil || len(keys) != 0 {
		t.Errorf("retry: %v, %v; want nothing written", keys, err)
	}
	if !errors.Is(be.create(ctx, claimed, []byte("x")), ErrExists) {
		t.Error("the claimed file can be created again")
	}
}

func TestPausedAfterClaimDir(t *testing.T) {
	t.Parallel()
	be, err := newDirBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testPausedAfterClaim(t, be)
}

func TestPausedAfterClaimS3(t *testing.T) {
	endpoint, ak, sk, _, _ := miniotest.Start(t)
	opt, err := Options{Endpoint: "http://" + endpoint, AccessKey: ak, SecretKey: sk, MaxRetries: 1}.withEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	be, err := newS3Backend(t.Context(), "s3://paused/prefix", opt)
	if err != nil {
		t.Fatal(err)
	}
	testPausedAfterClaim(t, be)
}
