package env

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
)

// The HTTP server's fixed bounds (the read timeout and the connection cap
// are Config's).
const (
	// headerTimeout bounds reading a request's headers (at most the read
	// timeout).
	headerTimeout = 10 * time.Second
	// idleConnTimeout closes a keep-alive connection with no request.
	idleConnTimeout = 2 * time.Minute
	// maxHeaderBytes bounds a request's headers (the API needs a few
	// hundred bytes).
	maxHeaderBytes = 64 << 10
	// writeSlack is what writing an answer may take on top of the wait
	// before it.
	writeSlack = 30 * time.Second
)

// limitListener caps ln at the connections the process can afford: the
// cap asked for, but at most half its open-file limit, so that a flood of
// clients leaves descriptors for the bus, the store and the sandbox. The
// connections beyond it wait in the kernel's accept queue.
func limitListener(ln net.Listener, want int, log *slog.Logger) (net.Listener, int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur/2 < uint64(want) {
		half := max(int(lim.Cur/2), 1)
		log.Warn("env: --max-conns lowered to half the open-file limit", "asked", want, "max_conns", half, "nofile", lim.Cur)
		want = half
	}
	return netutil.LimitListener(ln, want), want
}

// newHTTPServer is the API's server: every request is bounded in the
// time its headers and body may take to arrive (readTimeout; a slow
// client is cut off), its answer in the time it may take to be written,
// an idle connection in how long it stays open, and its headers in size.
// A step or close, which wait for an execution, extend their connection's
// deadlines once their body is read (httpapi.Options.LongWait).
func newHTTPServer(ctx context.Context, h http.Handler, readTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(headerTimeout, readTimeout),
		ReadTimeout:       readTimeout,
		WriteTimeout:      readTimeout + writeSlack,
		IdleTimeout:       idleConnTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}
