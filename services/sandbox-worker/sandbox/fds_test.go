package sandbox

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/medgym/medgym/schemas"
)

// TestInheritedDescriptorsStayOut: a descriptor the worker inherited
// without close-on-exec (here a pipe made before the sandbox starts) never
// reaches the code.
func TestInheritedDescriptorsStayOut(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe2(p[:], 0); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	for name, mk := range backends() {
		t.Run(name, func(t *testing.T) {
			s := mk(t, Config{})
			r := exec1(t, s, code("fds-"+name, "import os\nprint(' '.join(sorted(os.listdir('/proc/self/fd'), key=int)))", 20))
			if r.Status != schemas.StatusOK {
				t.Fatalf("status %s: %s", r.Status, r.Message)
			}
			for _, fd := range strings.Fields(r.Stdout) {
				if fd == strconv.Itoa(p[0]) || fd == strconv.Itoa(p[1]) {
					t.Fatalf("the code sees descriptors %s; the worker's pipe is %v", strings.TrimSpace(r.Stdout), p)
				}
			}
		})
	}
}
