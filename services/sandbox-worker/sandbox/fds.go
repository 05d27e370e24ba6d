package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// closeInheritedOnExec sets close-on-exec on every descriptor above
// stderr. os/exec hands a child only its standard streams and ExtraFiles,
// but a descriptor this process inherited without close-on-exec (a pipe
// or socket of whatever started the worker) would reach every child, and
// through bwrap, which closes nothing, the agent's code.
func closeInheritedOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("sandbox: list open descriptors: %w", err)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}
