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

// errDiskQuota cancels a run whose workspace grew past Limits.DiskBytes.
var errDiskQuota = errors.New("workspace disk quota exceeded")

// diskPoll is how often a run's workspace is measured. The overshoot past
// the quota is bounded by what the code can write in one interval.
const diskPoll = 100 * time.Millisecond

// diskUsage returns the bytes allocated to the files under dir (blocks,
// not apparent sizes: a sparse file costs only what it holds; a file with
// several links counts once). A directory the code made unreadable is
// opened up again (the worker owns the workspace) and walked.
func diskUsage(dir string) (int64, error) {
	var total int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && errors.Is(err, fs.ErrPermission) && path != dir {
				if os.Chmod(path, 0o700) == nil {
					n, err := diskUsage(path)
					total += n
					if err != nil {
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
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			total += info.Size()
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// watchDisk returns a context that is canceled with errDiskQuota when the
// workspace at dir grows past limit during the run and beyond its size at
// the start (so a workspace already over the quota can still run code
// that deletes files). stop ends the watch. limit <= 0 watches nothing.
// The size at the start is measured beside the run, not before it (a walk
// of the workspace is not on a warm run's path); what the code writes
// before that measurement counts as already there, an overshoot of the
// same kind as one poll interval's.
func watchDisk(ctx context.Context, dir string, limit int64) (context.Context, func()) {
	if limit <= 0 {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		start, _ := diskUsage(dir)
		t := time.NewTicker(diskPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-t.C:
				if n, err := diskUsage(dir); err == nil && n > limit && n > start {
					cancel(errDiskQuota)
					return
				}
			}
		}
	}()
	// stop does not wait for a walk in progress: a cancel after it has no
	// effect, the first cause stays.
	return wctx, func() {
		close(done)
		cancel(nil)
	}
}
