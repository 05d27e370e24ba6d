package sandbox

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestDockerSeccompProfile: the profile is Docker's default without any
// syscall of the bwrap deny-list and without foreign ABIs.
func TestDockerSeccompProfile(t *testing.T) {
	js, err := dockerSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		ArchMap       []struct {
			Arch      string   `json:"architecture"`
			SubArches []string `json:"subArchitectures"`
		} `json:"archMap"`
		Syscalls []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" || len(p.ArchMap) == 0 {
		t.Fatalf("default action %q, %d arches", p.DefaultAction, len(p.ArchMap))
	}
	for _, a := range p.ArchMap {
		if len(a.SubArches) != 0 {
			t.Fatalf("%s keeps sub-architectures %v", a.Arch, a.SubArches)
		}
	}
	allowed := map[string]bool{}
	for _, sc := range p.Syscalls {
		if sc.Action == "SCMP_ACT_ALLOW" {
			for _, n := range sc.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range deniedSyscalls {
		if allowed[n] {
			t.Errorf("%s is allowed", n)
		}
	}
	for _, n := range []string{"read", "write", "openat", "clone", "mmap", "futex", "execve"} {
		if !allowed[n] {
			t.Errorf("%s is not allowed: the profile lost more than the deny-list", n)
		}
	}
	if !slices.Contains(deniedSyscalls, "ptrace") {
		t.Fatal("ptrace left the deny-list")
	}
}
