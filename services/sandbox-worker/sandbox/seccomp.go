package sandbox

// The seccomp filter of the bwrap backend. It is assembled with
// github.com/elastic/go-seccomp-bpf: pure Go (no cgo, no libseccomp to
// install or link), maintained by Elastic and used by Beats to filter their
// own syscalls, with per-arch syscall tables and argument conditions. The
// library assembles the BPF program; bwrap loads it (--seccomp FD) just
// before it execs the sandboxed command, so bwrap itself runs unfiltered.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// deniedSyscalls fail with EPERM inside the sandbox. The policy is
// "default allow": a data-science Python program (numpy, pandas, sqlite3,
// threads, multiprocessing, subprocess) needs none of these, and each one
// is kernel attack surface that the namespaces and dropped capabilities
// alone leave reachable (or reachable again inside a nested user namespace).
var deniedSyscalls = []string{
	// Inspecting or modifying other processes.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// Mounts and filesystem views, old and new mount API.
	"mount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"open_by_handle_at", "name_to_handle_at", "quotactl", "quotactl_fd",
	// Namespaces: creating or entering them (clone's flags are filtered below).
	"unshare", "setns",
	// Machine administration.
	"swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module", "acct", "vhangup",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
	"iopl", "ioperm", "lookup_dcookie",
	// Large, frequently exploited kernel subsystems.
	"bpf", "perf_event_open", "userfaultfd", "fanotify_init",
	"keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// archSpecific are denied syscalls that only some architectures have
// (iopl and ioperm are x86 only); elsewhere they are skipped. Any other
// name the syscall table lacks is a mistake and fails the build.
var archSpecific = map[string]bool{"iopl": true, "ioperm": true}

// cloneNewFlags are the CLONE_NEW* namespace flags clone(2) accepts:
// NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. (CLONE_NEWTIME
// exists only for clone3 and unshare, both denied.)
const cloneNewFlags = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

// Values of personality(2)'s argument that stay allowed: PER_LINUX and the
// query 0xffffffff (as a 32-bit and a sign-extended 64-bit register).
// Every other persona (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...) is EPERM.
var personalityAllowed = []uint64{0, 0xffffffff, 0xffffffffffffffff}

// bpfMaxInsns is the kernel's limit on a classic BPF program (BPF_MAXINSNS);
// at 8 bytes per instruction the program also fits a pipe's buffer.
const bpfMaxInsns = 4096

// seccompPolicy is the filter as go-seccomp-bpf's policy for info's syscall
// table. clone3 returns ENOSYS, not EPERM: its flags live in memory where
// seccomp cannot look, and glibc falls back to clone(2) on ENOSYS (threads,
// posix_spawn), whose flags are in a register and filtered. Docker's
// default profile does the same.
func seccompPolicy(info *arch.Info) seccomp.Policy {
	var names []string
	for _, n := range deniedSyscalls {
		if _, ok := info.SyscallNames[n]; ok || !archSpecific[n] {
			names = append(names, n)
		}
	}
	personality := make([]seccomp.Condition, len(personalityAllowed))
	for i, v := range personalityAllowed {
		personality[i] = seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: v}
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno | seccomp.Action(syscall.EPERM), Names: names},
			{Action: seccomp.ActionErrno | seccomp.Action(syscall.EPERM), NamesWithCondtions: []seccomp.NameWithConditions{
				// clone's first argument is its flags on x86-64 and arm64.
				{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewFlags}}},
				{Name: "personality", Conditions: personality},
			}},
			{Action: seccomp.ActionErrno | seccomp.Action(syscall.ENOSYS), Names: []string{"clone3"}},
		},
	}
}

// buildSeccomp assembles the filter for the running architecture and
// returns it as bwrap's --seccomp reads it: an array of struct
// sock_filter in native byte order.
func buildSeccomp() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	p := seccompPolicy(info)
	prog, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	// The library sends a foreign architecture (e.g. the i386 ABI through
	// int 0x80 on x86-64, whose numbers differ) to the default action,
	// which is allow: deny every non-native arch before its program runs.
	// (It already returns ENOSYS for the x32 ABI.)
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(syscall.EPERM)},
	}
	raw, err := bpf.Assemble(append(guard, prog...))
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	if len(raw) > bpfMaxInsns {
		return nil, fmt.Errorf("seccomp filter: %d instructions, more than the kernel's %d", len(raw), bpfMaxInsns)
	}
	var buf bytes.Buffer
	for _, ins := range raw {
		// struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }
		_ = binary.Write(&buf, binary.NativeEndian, struct {
			Op     uint16
			Jt, Jf uint8
			K      uint32
		}{ins.Op, ins.Jt, ins.Jf, ins.K})
	}
	return buf.Bytes(), nil
}

// seccompFile returns the read end of a pipe that holds prog and is
// already closed for writing, so bwrap reads prog and then EOF. The
// program is at most 32 KiB (bpfMaxInsns), below any pipe's buffer, so the
// write cannot block.
func seccompFile(prog []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	_, werr := w.Write(prog)
	if err := errors.Join(werr, w.Close()); err != nil {
		r.Close()
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	return r, nil
}
