package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

// constructor builds a Sandbox for one backend.
type constructor func(t testing.TB, cfg Config) *Sandbox

// requireBwrap skips when bubblewrap is missing, except in CI.
func requireBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap missing in CI: %v", err)
		}
		t.Skip("bwrap not installed (apt-get install bubblewrap)")
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func newWith(warm int) constructor {
	return func(t testing.TB, cfg Config) *Sandbox {
		t.Helper()
		requireBwrap(t)
		cfg.Backend = BackendBwrap
		cfg.Warm = warm
		if cfg.WorkRoot == "" {
			cfg.WorkRoot = filepath.Join(openTempDir(t), "work")
		}
		if cfg.Limits.WallTimeout == 0 {
			cfg.Limits = testLimits()
		}
		s, err := New(t.Context(), cfg, testLogger(t))
		if err != nil {
			t.Fatalf("new sandbox: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return s
	}
}

// backends lists every backend the suites run against.
func backends() map[string]constructor {
	b := map[string]constructor{"cold": newWith(0), "warm": newWith(1)}
	if os.Getenv("MEDGYM_DOCKER") == "1" {
		b["docker"] = newDocker
		b["docker-pool"] = dockerWith(1)
	}
	return b
}

func testLimits() Limits {
	l := DefaultLimits()
	l.MemoryBytes = 768 << 20
	l.Pids = 64
	l.CPUSeconds = 20
	l.FileSizeBytes = 16 << 20
	l.OutputBytes = 64 << 10
	l.DiskBytes = 64 << 20
	l.DiskInodes = 1000
	l.WallTimeout = 30 * time.Second
	return l
}

var epSeq atomic.Int64

func newEpisode() string { return fmt.Sprintf("ep-%d-%d", os.Getpid(), epSeq.Add(1)) }

func code(ep, src string, timeout int) schemas.ActionRequest {
	p, _ := json.Marshal(map[string]string{"code": src})
	return req(ep, schemas.Action{Name: schemas.ActionValidateCode, Params: p}, timeout)
}

func term(ep, cmd string, timeout int) schemas.ActionRequest {
	p, _ := json.Marshal(map[string]string{"cmd": cmd})
	return req(ep, schemas.Action{Name: schemas.ActionTerminal, Params: p}, timeout)
}

// autoTurn in a request's turn asks exec1 for the episode's next turn, as
// an episode's requests carry increasing turns (a request with the turn
// the workspace last ran is a redelivery, see Sandbox.catchUp).
const autoTurn = -1

var turns sync.Map // episode id -> *atomic.Int64, the next turn

// numbered gives r the next turn of its episode if it asks for one.
func numbered(r schemas.ActionRequest) schemas.ActionRequest {
	if r.Ref.Turn == autoTurn {
		n, _ := turns.LoadOrStore(r.Ref.EpisodeID, new(atomic.Int64))
		r.Ref.Turn = int(n.(*atomic.Int64).Add(1) - 1)
	}
	return r
}

func req(ep string, a schemas.Action, timeout int) schemas.ActionRequest {
	return schemas.ActionRequest{
		Ref:    schemas.EpisodeRef{RunID: "run", EpisodeID: ep, TaskID: "t1", Dataset: "test", Turn: autoTurn},
		Action: a, TimeoutSec: timeout,
	}
}

func exec1(t testing.TB, s *Sandbox, r schemas.ActionRequest) schemas.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := s.Execute(ctx, numbered(r))
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	return res
}

// openTempDir is t.TempDir made traversable by the sandbox user, which the
// worker drops to before starting bwrap.
func openTempDir(t testing.TB) string {
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
