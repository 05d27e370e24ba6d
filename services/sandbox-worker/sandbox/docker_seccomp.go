package sandbox

import (
	"encoding/json"
	"fmt"
	"slices"

	mobyseccomp "github.com/moby/profiles/seccomp"
)

// dockerSeccomp is the docker backend's seccomp profile, as the JSON the
// engine takes in "seccomp=<profile>". It starts from Docker's own default
// profile (github.com/moby/profiles/seccomp, the package the engine builds
// it from: an allow-list whose default action is EPERM) and tightens it to
// the bwrap filter's policy: the syscalls in deniedSyscalls are dropped
// from every allow rule, so they get the default EPERM (the default profile
// allows ptrace, process_vm_readv/writev, userfaultfd and personality
// queries among them), and only the native architecture stays (the default
// also allows the i386 and x32 ABIs on amd64; the kernel kills a process
// that uses another). Namespaced clone, clone3 and personality already
// follow the same rules in the default profile.
func dockerSeccomp() (string, error) {
	p := mobyseccomp.DefaultProfile()
	for _, sc := range p.Syscalls {
		sc.Names = slices.DeleteFunc(sc.Names, func(n string) bool { return slices.Contains(deniedSyscalls, n) })
	}
	p.Syscalls = slices.DeleteFunc(p.Syscalls, func(sc *mobyseccomp.Syscall) bool { return len(sc.Names) == 0 })
	for i := range p.ArchMap {
		p.ArchMap[i].SubArches = nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("sandbox: docker seccomp profile: %w", err)
	}
	return string(b), nil
}
