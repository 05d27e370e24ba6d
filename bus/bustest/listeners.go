package bustest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ListeningPorts returns the TCP ports process pid listens on (IPv4 and
// IPv6, any address), sorted, read from /proc: the sockets among its open
// descriptors that /proc/<pid>/net/tcp{,6} shows in state LISTEN.
func ListeningPorts(pid int) ([]int, error) {
	dir := fmt.Sprintf("/proc/%d", pid)
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return nil, fmt.Errorf("descriptors of process %d: %w", pid, err)
	}
	sockets := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil {
			if inode, ok := strings.CutPrefix(l, "socket:["); ok {
				sockets[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	seen := map[int]bool{}
	for _, tab := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(dir, "net", tab))
		if err != nil {
			continue // no IPv6
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !sockets[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if port, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
				seen[int(port)] = true
			}
		}
		_ = f.Close()
	}
	ports := make([]int, 0, len(seen))
	for p := range seen {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	return ports, nil
}
