package sandbox

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

const (
	retAllow = 0x7fff0000
	retEPERM = 0x00050000 | int(syscall.EPERM)
	retENOSY = 0x00050000 | int(syscall.ENOSYS)
)

// runFilter evaluates the filter for one syscall in x/net/bpf's VM. The VM
// loads 32-bit words big-endian, so each word of struct seccomp_data is
// written big-endian at its little-endian position (a 64-bit argument's
// low word first), which is what the program reads on a little-endian host.
func runFilter(t *testing.T, prog []byte, auditArch uint32, nr int, args ...uint64) int {
	t.Helper()
	var raw []bpf.RawInstruction
	for i := 0; i < len(prog); i += 8 {
		raw = append(raw, bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(prog[i:]), Jt: prog[i+2], Jf: prog[i+3],
			K: binary.NativeEndian.Uint32(prog[i+4:]),
		})
	}
	ins, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter has instructions x/net/bpf does not know")
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatalf("filter does not load: %v", err)
	}
	data := make([]byte, 64) // nr, arch, instruction_pointer, args[6]
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], auditArch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[16+8*i+4:], uint32(a>>32))
	}
	ret, err := vm.Run(data)
	if err != nil {
		t.Fatalf("filter run: %v", err)
	}
	return ret
}

func TestSeccompProgram(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the VM check assumes a little-endian host")
	}
	prog, err := buildSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog) > bpfMaxInsns*8 {
		t.Fatalf("program of %d bytes: want a non-empty array of 8-byte sock_filter", len(prog))
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	native := uint32(info.ID)
	nr := func(name string) int {
		n, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("no syscall %s on %s", name, info.Name)
		}
		return n
	}
	for _, name := range deniedSyscalls {
		if _, ok := info.SyscallNames[name]; !ok && archSpecific[name] {
			continue
		}
		if got := runFilter(t, prog, native, nr(name)); got != retEPERM {
			t.Errorf("%s: filter returns %#x, want EPERM", name, got)
		}
	}
	const cloneThread = 0x3d0f00 // glibc's pthread_create flags (CLONE_VM|CLONE_FS|...|CLONE_SETTLS...)
	cases := []struct {
		what string
		arch uint32
		nr   int
		args []uint64
		want int
	}{
		{"read", native, nr("read"), nil, retAllow},
		{"execve", native, nr("execve"), nil, retAllow},
		{"clone for fork", native, nr("clone"), []uint64{uint64(syscall.SIGCHLD)}, retAllow},
		{"clone for a thread", native, nr("clone"), []uint64{cloneThread}, retAllow},
		{"clone CLONE_NEWUSER", native, nr("clone"), []uint64{syscall.CLONE_NEWUSER | uint64(syscall.SIGCHLD)}, retEPERM},
		{"clone CLONE_NEWNET", native, nr("clone"), []uint64{syscall.CLONE_NEWNET}, retEPERM},
		{"clone CLONE_NEWNS", native, nr("clone"), []uint64{syscall.CLONE_NEWNS}, retEPERM},
		{"clone3", native, nr("clone3"), nil, retENOSY},
		{"personality query", native, nr("personality"), []uint64{0xffffffff}, retAllow},
		{"personality query, sign-extended", native, nr("personality"), []uint64{^uint64(0)}, retAllow},
		{"personality PER_LINUX", native, nr("personality"), []uint64{0}, retAllow},
		{"personality ADDR_NO_RANDOMIZE", native, nr("personality"), []uint64{0x0040000}, retEPERM},
		{"personality READ_IMPLIES_EXEC", native, nr("personality"), []uint64{0x0400000}, retEPERM},
		{"foreign arch (i386 getpid)", uint32(arch.I386.ID), 20, nil, retEPERM},
		{"foreign arch (arm)", uint32(arch.ARM.ID), 20, nil, retEPERM},
	}
	if info.ID == arch.X86_64.ID {
		cases = append(cases, struct {
			what string
			arch uint32
			nr   int
			args []uint64
			want int
		}{"x32 ABI", native, nr("read") | 0x40000000, nil, retENOSY})
	}
	for _, c := range cases {
		if got := runFilter(t, prog, c.arch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: filter returns %#x, want %#x", c.what, got, c.want)
		}
	}
}

// checkCommand checks how b's sh+bwrap command carries the filter: with
// want set, as `--seccomp 5` on a pipe at fd 5 holding want; without, not
// at all.
func checkCommand(t *testing.T, b *bwrapBase, want []byte) {
	t.Helper()
	f3, f4 := os.Stdin, os.Stdout // any files: they are only passed along
	cmd, filter, err := b.command("script", []string{"--unshare-all"}, []string{"python3"}, []*os.File{f3, f4})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(cmd.Args, "--seccomp")
	if want == nil {
		if i >= 0 || filter != nil || len(cmd.ExtraFiles) != 2 {
			t.Fatalf("no filter wanted, got argv %q, %d extra files", cmd.Args, len(cmd.ExtraFiles))
		}
		return
	}
	defer filter.Close()
	if i < 0 || cmd.Args[i+1] != "5" || slices.Index(cmd.Args, "python3") < i ||
		len(cmd.ExtraFiles) != 3 || cmd.ExtraFiles[2] != filter {
		t.Fatalf("argv %q with %d extra files: want --seccomp 5 before the command, the filter as fd 5", cmd.Args, len(cmd.ExtraFiles))
	}
	got, err := io.ReadAll(filter)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the pipe holds %d bytes (%v), want the %d-byte program", len(got), err, len(want))
	}
}

func TestSeccompCommand(t *testing.T) {
	prog, err := buildSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	checkCommand(t, &bwrapBase{bwrap: "/usr/bin/bwrap", seccomp: prog}, prog)
	checkCommand(t, &bwrapBase{bwrap: "/usr/bin/bwrap"}, nil)
}

// baseOf returns the bwrap settings a sandbox runs with.
func baseOf(t *testing.T, s *Sandbox) *bwrapBase {
	t.Helper()
	switch r := s.run.(type) {
	case *coldRunner:
		return r.bwrapBase
	case *warmPool:
		return r.bwrapBase
	}
	t.Fatalf("not a bwrap runner: %T", s.run)
	return nil
}

// TestSeccompConfig checks that the filter is on by default and off only
// with Config.DisableSeccomp, for cold runs and warm servers: in the
// command and in the kernel's view of the running code.
func TestSeccompConfig(t *testing.T) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(status), "Seccomp_filters:")
	host, _, _ := strings.Cut(after, "\n")
	host = strings.TrimSpace(host) // the worker's own filters, inherited either way
	filters := func(t *testing.T, s *Sandbox) string {
		t.Helper()
		r := exec1(t, s, code(newEpisode(), "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp_filters:')][0])", 20))
		return strings.TrimSpace(r.Stdout)
	}
	for name, warm := range map[string]int{"cold": 0, "warm": 1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			on := newWith(warm)(t, Config{})
			b := baseOf(t, on)
			if len(b.seccomp) == 0 {
				t.Fatal("default config has no seccomp program")
			}
			checkCommand(t, b, b.seccomp)
			off := newWith(warm)(t, Config{DisableSeccomp: true})
			checkCommand(t, baseOf(t, off), nil)
			if got := filters(t, off); got != host {
				t.Errorf("seccomp filters with DisableSeccomp: %q, want the host's %s", got, host)
			}
			if got := filters(t, on); got == host || got == "" {
				t.Errorf("seccomp filters by default: %q, want more than the host's %s", got, host)
			}
		})
	}
}
