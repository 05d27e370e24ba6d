package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

func TestReapAfterAbruptStop(t *testing.T) {
	t.Parallel()
	for name, mk := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := filepath.Join(openTempDir(t), "work")
			a := mk(t, Config{WorkRoot: root})
			dead, alive := newEpisode(), newEpisode()
			for _, ep := range []string{dead, alive} {
				if r := exec1(t, a, code(ep, "open('f','w').write('x')", 20)); r.Status != schemas.StatusOK {
					t.Fatalf("setup: %+v", r)
				}
			}
			// A second sandbox on the same root (the worker restarted) reaps
			// what the first left, keeping live episodes only when asked.
			b := mk(t, Config{WorkRoot: root})
			if _, err := os.Stat(filepath.Join(root, alive)); !os.IsNotExist(err) {
				t.Fatalf("start-up did not clear orphaned workspaces: %v", err)
			}
			if r := exec1(t, b, code(alive, "open('g','w').write('y')", 20)); r.Status != schemas.StatusOK {
				t.Fatalf("new sandbox unusable: %+v", r)
			}
			if r := exec1(t, b, code(dead, "open('g','w').write('y')", 20)); r.Status != schemas.StatusOK {
				t.Fatalf("new sandbox unusable: %+v", r)
			}
			n, err := b.Reap(func(ep string) bool { return ep == alive })
			if err != nil || n != 1 {
				t.Fatalf("reap removed %d, err %v; want 1", n, err)
			}
			if _, err := os.Stat(filepath.Join(root, dead)); !os.IsNotExist(err) {
				t.Fatalf("dead workspace kept: %v", err)
			}
			if _, err := os.Stat(filepath.Join(root, alive)); err != nil {
				t.Fatalf("live workspace removed: %v", err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for len(sandboxProcs(root)) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("sandbox processes left after close: %v", sandboxProcs(root))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func TestIdleTTL(t *testing.T) {
	s := newWith(0)(t, Config{IdleTTL: 200 * time.Millisecond})
	ep := newEpisode()
	exec1(t, s, code(ep, "print(1)", 10))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(s.workspacePath(ep)); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("idle workspace not reaped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(t.Context(), Config{Bwrap: "/nonexistent/bwrap", Python: "/nonexistent/python3"}, nil); err == nil ||
		!strings.Contains(err.Error(), "apt-get install") {
		t.Fatalf("want an error naming the fix, got %v", err)
	}
	if _, err := New(t.Context(), Config{Backend: "vm"}, nil); err == nil {
		t.Fatal("unknown backend accepted")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.Context(), Config{WorkRoot: dir}, nil); err == nil {
		t.Fatal("a foreign non-empty work root was accepted")
	}
}

func TestCapBuffer(t *testing.T) {
	fired := 0
	c := newCapBuffer(10, 25, func() { fired++ })
	for range 3 {
		_, _ = c.Write([]byte("0123456789"))
	}
	got, tr := c.result()
	if !tr || !strings.HasPrefix(got, "0123456789\n...[output truncated: 20 more bytes") || fired != 1 {
		t.Fatalf("got %q %v fired=%d", got, tr, fired)
	}
}
