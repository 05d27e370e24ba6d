package miniotest

import "syscall"

// sysProcAttr makes the kernel kill the server if the test binary dies
// before its cleanup runs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
