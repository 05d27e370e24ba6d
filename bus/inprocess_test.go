package bus_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/bus/embedded"
	"github.com/medgym/medgym/schemas"
)

// TestInProcessServerListensNowhere: an embedded server started InProcess
// opens no socket (no TCP listener of this process appears), yet the
// process itself connects and uses JetStream through it.
func TestInProcessServerListensNowhere(t *testing.T) {
	before, err := bustest.ListeningPorts(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), InProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if after, err := bustest.ListeningPorts(os.Getpid()); err != nil || !slices.Equal(after, before) {
		t.Fatalf("listening before the in-process server %v, after %v (%v)", before, after, err)
	}
	if a := ns.Addr(); a != nil {
		t.Fatalf("the in-process server listens on %v", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, bus.InProcessURL, "test", slog.New(slog.DiscardHandler), bus.WithInProcess(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "r1", schemas.RunStatus{Total: 3}); err != nil {
		t.Fatal(err)
	}
	if st, _, err := kv.Get(ctx, "r1"); err != nil || st.Total != 3 {
		t.Fatalf("read back %+v %v", st, err)
	}
}
