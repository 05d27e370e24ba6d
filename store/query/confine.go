package query

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// ErrNoLandlock is Confine's answer on a kernel that does not enforce
// Landlock (before Linux 5.13, built without it, or not in the active
// LSMs): nothing was restricted.
var ErrNoLandlock = errors.New("the kernel does not enforce Landlock")

// Confine restricts this whole process, every thread (DuckDB's included)
// and whatever it starts later, to reading files: nothing may be created,
// written, truncated, renamed or removed anywhere but under scratch (a
// temporary copy of an S3 store), and scratch itself may be removed once
// empty (an empty directory beside it too: Landlock grants removing
// directories beneath a directory, not one entry of it).
// Files already open (stdout, stderr) are not affected. It cannot be
// undone, so only a process that has nothing left to write but its open
// files calls it: `medgym query` before its statement runs, so that a
// statement the checks miss (the statement type, DuckDB's own settings)
// still cannot change the store. It uses Linux Landlock, at the kernel's
// ABI (a newer ABI restricts more); ErrNoLandlock when the kernel has none.
func Confine(scratch ...string) error {
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return fmt.Errorf("%w (%v)", ErrNoLandlock, err)
	}
	rules := []landlock.Rule{landlock.RODirs("/")}
	for _, dir := range scratch {
		rules = append(rules, landlock.RWDirs(dir),
			landlock.PathAccess(landlock.AccessFSSet(llsyscall.AccessFSRemoveDir), filepath.Dir(filepath.Clean(dir))))
	}
	if err := landlock.V7.BestEffort().RestrictPaths(rules...); err != nil {
		return fmt.Errorf("confine the query to reading (Landlock ABI %d): %w", abi, err)
	}
	return nil
}
