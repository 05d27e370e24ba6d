package systemtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
)

// TestStoreUnwritableFailsRun: a store that takes the verifier's start-up
// probe but refuses the run's rows (a file stands where the run's
// directory goes, as a full or read-only volume would refuse them) no
// longer makes the verifier retry forever: after --store-give-up the
// episodes are dead-lettered with the store's error and the dispatcher
// fails the run with it, so `medgym run` ends with the reason. Before, the
// run never ended (this test timed out).
func TestStoreUnwritableFailsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.Limit, f.RunID, f.Verifier.StoreGiveUp = 2, "nostore", 2*time.Second
	if err := os.MkdirAll(filepath.Join(f.Store, "trajectories"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.Store, "trajectories", "run=nostore"), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	_, err = cli.RunSpec(ctx, spec, f, logs)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("run on a store refusing its rows: %v, want it failed with the store's error\n%s", err, tail(logs.String(), 4000))
	}
	t.Logf("run: %v", err)
	for _, want := range []string{"could not store episode nostore--", "not a directory", "giving up"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("run error %q does not say %q", err, want)
		}
	}
}
