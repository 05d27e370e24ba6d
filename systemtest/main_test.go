package systemtest

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
)

// medgymChild, set in a process's environment, makes the test binary play
// the medgym command with the process's arguments (a real, separate
// process without a separate build); medgymNoFile, when set too, first
// lowers the process's open-file limit to that many descriptors.
const (
	medgymChild  = "MEDGYM_SYSTEMTEST_MEDGYM"
	medgymNoFile = "MEDGYM_SYSTEMTEST_NOFILE"
)

func TestMain(m *testing.M) {
	if os.Getenv(medgymChild) != "" {
		if n, err := strconv.ParseUint(os.Getenv(medgymNoFile), 10, 64); err == nil {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				panic(err)
			}
		}
		cli.Standalone = true // a process of its own, as the medgym binary
		bus.CommandMain("medgym", cli.Run)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// medgymProc is a medgym command running as a process of its own.
type medgymProc struct {
	cmd  *exec.Cmd
	url  string // env serve's API, once it serves
	mu   sync.Mutex
	err  strings.Builder // its standard error
	done chan struct{}   // closed once it ended (exit in exit)
	exit error
}

// medgym runs the medgym command with args as a process of its own (env:
// extra environment) and returns at once.
func medgym(t *testing.T, env []string, args ...string) *medgymProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), medgymChild+"=1"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &medgymProc{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.err.WriteString(line + "\n")
			p.mu.Unlock()
			if _, rest, ok := strings.Cut(line, "serving http://"); ok {
				a, _, _ := strings.Cut(rest, " ")
				select {
				case addr <- a:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.exit = cmd.Wait()
	}()
	p.urlFrom(addr)
	t.Cleanup(func() { p.stop(t) })
	return p
}

// urlFrom fills url when env serve says where it serves (in the background).
func (p *medgymProc) urlFrom(addr <-chan string) {
	go func() {
		select {
		case a := <-addr:
			p.mu.Lock()
			p.url = "http://" + a
			p.mu.Unlock()
		case <-p.done:
		}
	}()
}

// serving waits until env serve serves and returns its API's URL.
func (p *medgymProc) serving(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		url := p.url
		p.mu.Unlock()
		if url != "" {
			return url
		}
		select {
		case <-p.done:
			t.Fatalf("medgym %v ended before serving:\n%s", p.cmd.Args[1:], p.stderr())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("medgym %v did not serve:\n%s", p.cmd.Args[1:], p.stderr())
	return ""
}

// wait waits for the process to end (killing it when ctx ends first) and
// returns its exit error.
func (p *medgymProc) wait(ctx context.Context) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.exit
}

func (p *medgymProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err.String()
}

// stop ends the process (SIGTERM, as Ctrl-C would) if it still runs.
func (p *medgymProc) stop(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = p.wait(ctx)
	if ctx.Err() != nil {
		t.Errorf("medgym %v did not stop on SIGTERM:\n%s", p.cmd.Args[1:], p.stderr())
	}
}
