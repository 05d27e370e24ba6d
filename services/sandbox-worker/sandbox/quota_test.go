package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWalkBudget: a walk counts every entry below the workspace (files,
// directories, links, inside unreadable directories too) and stops at its
// budget, so its cost does not grow with the tree past it.
func TestWalkBudget(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("x", filepath.Join(sub, fmt.Sprint("l", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sub, 0); err != nil {
		t.Fatal(err)
	}
	u, err := walkUsage(dir, 0)
	if err != nil || u.full || u.entries != 601 {
		t.Fatalf("whole walk: %+v, %v; want 601 entries", u, err)
	}
	u, err = walkUsage(dir, 100)
	if err != nil || !u.full || u.entries != 101 {
		t.Fatalf("walk with a budget of 100: %+v, %v; want it stopped at 101 entries", u, err)
	}
}

// TestWatchEntries: the watcher cancels a run whose workspace grows past
// the entry limit, and leaves alone one that starts over it (even past
// twice the limit) and shrinks.
func TestWatchEntries(t *testing.T) {
	dir := t.TempDir()
	lim := quotaLimits{bytes: 1 << 30, entries: 200}
	touch := func(from, to int) {
		for i := from; i < to; i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, stop := watchDisk(t.Context(), dir, lim)
	for i := 0; ctx.Err() == nil; i++ { // a flood of empty files, no blocks
		touch(i, i+1)
		if i > 20_000 {
			t.Fatal("the watcher never stopped the flood")
		}
	}
	stop()
	if cause := context.Cause(ctx); !errors.Is(cause, errInodeQuota) {
		t.Fatalf("cause %v, want %v", cause, errInodeQuota)
	}
	// Over the limit at the start, even past twice the limit (a flood can
	// overshoot that much in one poll interval), deleting files is not
	// stopped.
	touch(30_000, 30_000+3*int(lim.entries))
	u, _ := walkUsage(dir, 0)
	if u.entries <= 3*lim.entries {
		t.Fatalf("%d entries at the start, want more than %d", u.entries, 3*lim.entries)
	}
	ctx, stop = watchDisk(t.Context(), dir, lim)
	defer stop()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents[:len(ents)/2] {
		_ = os.Remove(filepath.Join(dir, e.Name()))
	}
	time.Sleep(3 * diskPoll) // a few walks
	if ctx.Err() != nil {
		t.Fatalf("a workspace of %d entries that shrinks was stopped: %v", u.entries, context.Cause(ctx))
	}
}
