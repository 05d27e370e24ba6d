package systemtest

import (
	"context"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
)

// TestBareNATSOnSmallVolume: a bare `nats-server -js` whose store is a
// 256 MiB volume offers 75% of it, less than the dead-letter stream's
// 1 GiB reservation; a service starting against it fails saying what
// JetStream offers, what medgym's streams reserve and what to do.
func TestBareNATSOnSmallVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: needs root")
	}
	natsBin := natsServerBinary(t)
	vol := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", vol).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", vol).Run() })
	logf, err := os.Create(filepath.Join(t.TempDir(), "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	ns := &proc{t: t, name: "nats-server", log: logf, args: []string{natsBin, "-js", "-a", host, "-p", port, "-sd", vol}}
	ns.start()
	defer ns.stop()
	waitListening(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _, err := bus.Start(ctx, "nats://"+addr, "dispatcher", "", slog.New(slog.DiscardHandler))
	if err == nil {
		conn.Close()
		t.Fatal("a service started on a store that cannot hold its streams")
	}
	for _, want := range []string{"JetStream offers", "bytes of file storage", "reserve 1073741824", "max_file_store", "deploy/README.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Log(err)
}
