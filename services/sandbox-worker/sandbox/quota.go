package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// errDiskQuota cancels a run whose workspace grew past Limits.DiskBytes;
// errInodeQuota one whose workspace grew past Limits.DiskInodes entries.
var (
	errDiskQuota  = errors.New("workspace disk quota exceeded")
	errInodeQuota = errors.New("workspace file count limit exceeded")
)

// diskPoll is how often a run's workspace is measured at most. The
// overshoot past the quota is bounded by what the code can write in one
// interval.
const diskPoll = 100 * time.Millisecond

// watchDuty bounds the watcher's CPU: after a walk that took d, the next
// starts no sooner than watchDuty*d later, so walking takes at most
// 1/(watchDuty+1) of a core whatever the tree's size (the walks themselves
// are bounded by the entry budget).
const watchDuty = 9

// usage is what a walk of a workspace found: the bytes allocated to its
// files (blocks, not apparent sizes: a sparse file costs only what it
// holds; a file with several links counts once) and its entries (files,
// directories, links, ..., the workspace itself not counted). full: the
// walk stopped at its budget, so both are lower bounds.
type usage struct {
	bytes, entries int64
	full           bool
}

// errBudget ends a walk that reached its entry budget.
var errBudget = errors.New("entry budget reached")

type walker struct {
	usage
	budget int64 // entries to count at most; <= 0: all
	seen   map[[2]uint64]bool
}

// walkUsage measures the workspace at dir, counting at most budget entries
// (<= 0: all), so a walk's cost does not grow with the tree past the
// budget. A directory the code made unreadable is opened up again (the
// worker owns the workspace) and walked.
func walkUsage(dir string, budget int64) (usage, error) {
	w := &walker{budget: budget, seen: map[[2]uint64]bool{}}
	err := w.walk(dir)
	if errors.Is(err, errBudget) {
		w.full, err = true, nil
	}
	return w.usage, err
}

// diskUsage returns the bytes allocated under dir (walkUsage, every entry).
func diskUsage(dir string) (int64, error) {
	u, err := walkUsage(dir, 0)
	return u.bytes, err
}

func (w *walker) walk(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && errors.Is(err, fs.ErrPermission) && path != dir {
				if os.Chmod(path, 0o700) == nil {
					if err := w.walk(path); err != nil {
						return err
					}
					return fs.SkipDir
				}
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if path != dir {
			w.entries++
			if w.budget > 0 && w.entries > w.budget {
				return errBudget
			}
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			w.bytes += info.Size()
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := [2]uint64{uint64(st.Dev), st.Ino}
			if w.seen[k] {
				return nil
			}
			w.seen[k] = true
		}
		w.bytes += st.Blocks * 512
		return nil
	})
}

// quotaLimits bound a workspace for the watcher: bytes allocated and
// entries. bytes <= 0 watches nothing.
type quotaLimits struct {
	bytes, entries int64
}

// watchDisk returns a context that is canceled with errDiskQuota when the
// workspace at dir grows past lim.bytes during the run and beyond its size
// at the start, or with errInodeQuota when its entries grow past
// lim.entries and beyond their number at the start (so a workspace already
// over a limit can still run code that deletes files). The walk at the
// start counts every entry (the tree is bounded: each earlier run was
// stopped one poll interval past the limit, or past its own start); the
// walks during the run count at most lim.entries more than the larger of
// that start and lim.entries: reaching that is over the limit. stop ends
// the watch. The size at the start is measured beside the
// run, not before it (a walk of the workspace is not on a warm run's
// path); what the code writes before that measurement counts as already
// there, an overshoot of the same kind as one poll interval's.
func watchDisk(ctx context.Context, dir string, lim quotaLimits) (context.Context, func()) {
	if lim.bytes <= 0 {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		start, _ := walkUsage(dir, 0)
		budget := max(start.entries, lim.entries) + lim.entries
		if lim.entries <= 0 {
			budget = 0 // no count limit: every walk counts all
		}
		wait := diskPoll
		t := time.NewTimer(wait)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-t.C:
			}
			begin := time.Now()
			u, err := walkUsage(dir, budget)
			took := time.Since(begin)
			switch {
			case err != nil:
			case lim.entries > 0 && (u.full || u.entries > lim.entries && u.entries > start.entries):
				cancel(errInodeQuota)
				return
			case u.bytes > lim.bytes && u.bytes > start.bytes:
				cancel(errDiskQuota)
				return
			}
			t.Reset(max(diskPoll, watchDuty*took))
		}
	}()
	// stop does not wait for a walk in progress: a cancel after it has no
	// effect, the first cause stays.
	return wctx, func() {
		close(done)
		cancel(nil)
	}
}
