package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// forkClient is the worker's end of a boot.py fork server (boot.py serve),
// shared by the warm pool (a socketpair into bwrap) and the docker backend
// (a unix socket the container's server listens on in a bind-mounted
// directory). One run at a time: the request (JSON) carries the run's
// stdout, stderr and code pipes by SCM_RIGHTS; the server forks a fresh
// child from its pristine state for it and answers with the child's wait
// status and max RSS once everything the run started is killed.
type forkClient struct {
	conn   *net.UnixConn
	limits Limits
	nproc  int // the run's RLIMIT_NPROC; 0: none
	// kill stops the server and everything in its sandbox, which ends the
	// reply read and the output pipes. It is called at most once per run,
	// possibly from an output-copying goroutine.
	kill func()
}

// forkReq is one run's request to a fork server.
type forkReq struct {
	Mode       string         `json:"mode"`
	Cwd        string         `json:"cwd"`
	PythonPath string         `json:"pythonpath"` // restored in the child: the server runs without it
	Limits     map[string]any `json:"limits"`
	// Code travels in the request when Inline (valid UTF-8, and the
	// request stays under maxInlineReq); else through the code pipe.
	Code   string `json:"code,omitempty"`
	Inline bool   `json:"inline,omitempty"`
}

// maxInlineReq bounds a request that carries its code: the server reads
// requests into 64 KiB.
const maxInlineReq = 32 << 10

// forkResp is a fork server's reply.
type forkResp struct {
	Status int    `json:"status"`
	MaxRSS int64  `json:"maxrss"`
	Error  string `json:"error"`
}

// run executes spec on the server. broken reports that the server was
// killed (timeout, output flood, cancel) or failed (no reply: it died,
// which only the run's own code or the OOM killer can do), so it must not
// serve another run. err is set only when the request could not be sent or
// ctx ended the run; a server that died mid-run is reported as the run
// killed by SIGKILL.
func (f forkClient) run(ctx context.Context, spec runSpec) (out runOutput, broken bool, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return out, false, fmt.Errorf("fork run: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return out, false, fmt.Errorf("fork run: %w", err)
	}
	codeR, codeW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return out, false, fmt.Errorf("fork run: %w", err)
	}
	mode := "python"
	if spec.shell {
		mode = "shell"
	}
	fr := forkReq{Mode: mode, Cwd: WorkDir, PythonPath: WorkDir, Limits: map[string]any{
		"cpu": f.limits.CPUSeconds, "fsize": f.limits.FileSizeBytes, "nofile": f.limits.NoFile,
		"nproc": f.nproc, "data": f.limits.MemoryBytes}}
	var req []byte
	if len(spec.code) < maxInlineReq && utf8.ValidString(spec.code) {
		// In the request, the child has its code without waiting for
		// the goroutine that would write the pipe to be scheduled.
		fr.Code, fr.Inline = spec.code, true
		if req, _ = json.Marshal(fr); len(req) > maxInlineReq {
			fr.Code, fr.Inline = "", false
		}
	}
	if !fr.Inline {
		req, _ = json.Marshal(fr)
	}
	begin := time.Now()
	_, _, err = f.conn.WriteMsgUnix(req, syscall.UnixRights(int(outW.Fd()), int(errW.Fd()), int(codeR.Fd())), nil)
	outW.Close()
	errW.Close()
	codeR.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		codeW.Close()
		return out, true, fmt.Errorf("fork run: send: %w", err)
	}
	if fr.Inline {
		codeW.Close()
	} else {
		go func() { _, _ = codeW.WriteString(spec.code); codeW.Close() }()
	}

	var kmu sync.Mutex
	var cause error
	kill := func(c error) {
		kmu.Lock()
		first := cause == nil
		if first {
			cause = c
		}
		kmu.Unlock()
		if first {
			f.kill()
		}
	}
	hard := int64(f.limits.OutputBytes) * 64
	stdout := newCapBuffer(f.limits.OutputBytes, hard, func() { kill(errFlood) })
	stderr := newCapBuffer(f.limits.OutputBytes, hard, func() { kill(errFlood) })
	var wg sync.WaitGroup
	wg.Go(func() { copyAll(stdout, outR) })
	wg.Go(func() { copyAll(stderr, errR) })

	respCh := make(chan forkResp, 1)
	go func() {
		buf := make([]byte, 4096)
		n, err := f.conn.Read(buf)
		var r forkResp
		if err != nil || json.Unmarshal(buf[:n], &r) != nil {
			r.Error = fmt.Sprintf("no reply from fork server: %v", err)
		}
		respCh <- r
	}()
	timer := time.NewTimer(spec.timeout)
	defer timer.Stop()
	var resp forkResp
	select {
	case resp = <-respCh:
	case <-timer.C:
		kill(errTimeout)
		resp = <-respCh
	case <-ctx.Done():
		kill(context.Cause(ctx))
		resp = <-respCh
	}
	out.duration = time.Since(begin)
	kmu.Lock()
	final := cause
	kmu.Unlock()
	if final == nil && resp.Error != "" {
		// The server is dead, or must be: everything in it goes.
		kill(errors.New(resp.Error))
	}
	wg.Wait()
	outR.Close()
	errR.Close()
	out.stdout, out.truncated = stdout.result()
	var tr bool
	out.stderr, tr = stderr.result()
	out.truncated = out.truncated || tr
	out.stdoutBytes, out.stderrBytes = stdout.size(), stderr.size()
	out.peak = resp.MaxRSS
	switch {
	case errors.Is(final, errTimeout):
		out.timedOut, out.exitCode, out.signal = true, -1, syscall.SIGKILL
	case errors.Is(final, errFlood):
		out.flood, out.exitCode, out.signal = true, -1, syscall.SIGKILL
	case final != nil:
		return out, true, fmt.Errorf("fork run canceled: %w", final)
	case resp.Error != "":
		// Only the episode's own code runs in the server's sandbox, so a
		// server that died mid-run was killed by that code (or the OOM
		// killer): report it as killed; the next turn gets a new server.
		out.exitCode, out.signal = -1, syscall.SIGKILL
		return out, true, nil
	default:
		ws := syscall.WaitStatus(resp.Status)
		if ws.Signaled() {
			out.exitCode, out.signal = -1, ws.Signal()
		} else {
			out.exitCode = ws.ExitStatus()
		}
		return out, false, nil
	}
	return out, true, nil
}

// awaitReady waits up to timeout for a new fork server's first message,
// sent once it has imported everything and its first standby child is
// warm. The read deadline is cleared again: it would otherwise fail every
// later reply read of a server that idled longer than timeout.
func awaitReady(conn *net.UnixConn, timeout time.Duration) error {
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	n, err := conn.Read(buf)
	_ = conn.SetReadDeadline(time.Time{})
	if err == nil && n == 0 {
		err = io.EOF
	}
	return err
}

func copyAll(w *capBuffer, r *os.File) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
