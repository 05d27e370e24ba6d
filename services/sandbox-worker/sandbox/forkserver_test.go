package sandbox

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAwaitReady checks that a server's ready wait leaves no read deadline
// behind: a server that idles longer than the ready timeout must still be
// able to answer its first run.
func TestAwaitReady(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "ctl")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	ours, theirs := conn(fds[0]), conn(fds[1])
	if err := awaitReady(ours, 20*time.Millisecond); err == nil {
		t.Fatal("ready without a message")
	}
	if _, err := theirs.Write([]byte(`{"ready":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := awaitReady(ours, 20*time.Millisecond); err != nil {
		t.Fatalf("ready: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // past the ready timeout
	if _, err := theirs.Write([]byte(`{"status":0}`)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := ours.Read(buf); err != nil || string(buf[:n]) != `{"status":0}` {
		t.Fatalf("reply after the ready timeout: %q, %v", buf[:n], err)
	}
	theirs.Close()
	if err := awaitReady(ours, time.Second); err == nil {
		t.Fatal("ready from a closed server")
	}
}

// TestDialSocket checks how the docker backend dials its containers'
// servers: through paths longer than sun_path, and never through a link or
// anything else code could leave where the socket belongs.
func TestDialSocket(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln.SetUnlinkOnClose(false)
	long := filepath.Join(dir, strings.Repeat("d", 100), strings.Repeat("e", 100))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(long, "sock")
	if err := os.Rename(filepath.Join(dir, "s"), sock); err != nil {
		t.Fatal(err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := dialSocket(sock)
	if err != nil {
		t.Fatalf("dial a %d-byte path: %v", len(sock), err)
	}
	buf := make([]byte, 8)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("read: %q %v", buf[:n], err)
	}
	c.Close()

	link := filepath.Join(dir, "link")
	if err := os.Symlink(sock, link); err != nil {
		t.Fatal(err)
	}
	if c, err := dialSocket(link); err == nil || !strings.Contains(err.Error(), "not a socket") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dialled through a link: %v", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dialSocket(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("dialled a regular file: %v", err)
	}
	if _, err := dialSocket(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing socket: %v, want ErrNotExist", err)
	}
	// Bound, not yet listening: connect retries on ECONNREFUSED.
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	bound := filepath.Join(dir, "bound")
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: bound}); err != nil {
		t.Fatal(err)
	}
	if _, err := dialSocket(bound); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("socket not listening: %v, want ECONNREFUSED", err)
	}
}
