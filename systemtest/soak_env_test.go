package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// soakEnvRun is the run the soak's environment sessions are stored under.
const soakEnvRun = "soak-env"

// soakEnv is the soak's environment server under slow HTTP clients: a
// `medgym env serve` process of its own (its own embedded bus: the
// schedule's faults are the pipeline's), a crowd of slow clients that
// trickle request headers (slowloris) or a body into it, reconnecting
// whenever the server cuts them off, and a player that runs sessions to
// the end one after another while the soak's runs last. Every session
// started must end (done, scored, stored) and be stored once.
type soakEnv struct {
	t       *testing.T
	p       *medgymProc
	dir     string
	clients int
	stop    context.CancelFunc
	flood   sync.WaitGroup
	player  sync.WaitGroup

	mu     sync.Mutex
	played int
	failed []string
}

// startSoakEnv starts the server (at most 48 connections, 1 s to read a
// request, and 256 file descriptors, so the crowd presses on every
// limit), the slow clients and the player.
func startSoakEnv(t *testing.T, ctx context.Context, clients int) *soakEnv {
	t.Helper()
	lib := canaryLibrary(t, "MEDGYM-CANARY-soak")
	e := &soakEnv{t: t, dir: t.TempDir(), clients: clients}
	e.p = medgym(t, []string{medgymNoFile + "=256"}, envServeArgs(t, lib, e.dir, "--max-conns", "48", "--read-timeout", "1s")...)
	base := e.p.serving(t)
	fctx, stop := context.WithCancel(ctx)
	e.stop = stop
	addr := strings.TrimPrefix(base, "http://")
	for i := range clients {
		e.flood.Go(func() { slowClient(fctx, addr, i%2 == 0) })
	}
	hc := &http.Client{Timeout: 2 * time.Minute}
	e.player.Go(func() {
		for fctx.Err() == nil {
			// A session begun is played to its end, even once the soak
			// is over: one left half-way would prove nothing.
			err := playSoakSession(hc, base)
			e.mu.Lock()
			if err != nil {
				e.failed = append(e.failed, err.Error())
			} else {
				e.played++
			}
			e.mu.Unlock()
		}
	})
	return e
}

// finish stops the crowd and the player, then the server, and checks
// that every session played is stored once; it returns a line for the
// soak's report.
func (e *soakEnv) finish(ctx context.Context) string {
	e.t.Helper()
	e.stop()
	e.player.Wait()
	e.flood.Wait()
	e.p.stop(e.t)
	rows := readRun(e.t, ctx, filepath.Join(e.dir, "store"), soakEnvRun)
	eps := map[string]int{}
	for _, r := range rows {
		eps[r.EpisodeID]++
		if len(r.Turns) != 2 {
			e.t.Errorf("env session %s stored with %d turns, want 2", r.EpisodeID, len(r.Turns))
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.failed {
		e.t.Errorf("env session under slow clients: %s", f)
	}
	if e.played == 0 {
		e.t.Errorf("no env session ended while the soak ran (%d failed)", len(e.failed))
	}
	if len(rows) != e.played || len(eps) != e.played {
		e.t.Errorf("env sessions: %d played to the end, %d rows of %d episodes stored; want each stored once", e.played, len(rows), len(eps))
	}
	return fmt.Sprintf("env sessions under %d slow clients: %d played to the end, %d failed, %d rows of %d episodes stored",
		e.clients, e.played, len(e.failed), len(rows), len(eps))
}

// playSoakSession plays a session of eicu-canary-0 in run soakEnvRun:
// one code run (the sandbox), then an answer (not the canary: incorrect).
func playSoakSession(hc *http.Client, base string) error {
	call := func(method, path string, body any, want int) (map[string]any, error) {
		var rd *bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, err := http.NewRequest(method, base+path, rd)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		defer resp.Body.Close()
		var out map[string]any
		derr := json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != want || derr != nil {
			return nil, fmt.Errorf("%s %s: %d (want %d) %v %v", method, path, resp.StatusCode, want, out, derr)
		}
		return out, nil
	}
	sess, err := call("POST", "/v1/sessions", map[string]any{"task_id": "eicu-canary-0", "options": map[string]any{"run_id": soakEnvRun}}, 201)
	if err != nil {
		return err
	}
	id, _ := sess["session_id"].(string)
	path := "/v1/sessions/" + id
	r, err := call("POST", path+"/step", map[string]any{"turn": 0, "content": act("validate_code", map[string]any{"code": "print(6*7)"})}, 200)
	if err != nil {
		return err
	}
	if r["observation"] != "42\n" {
		return fmt.Errorf("session %s: code step: %v", id, r)
	}
	if r, err = call("POST", path+"/step", map[string]any{"turn": 1, "content": act("answer", map[string]any{"answer": "42"})}, 200); err != nil {
		return err
	}
	if r["done"] != true {
		return fmt.Errorf("session %s: answer step: %v", id, r)
	}
	st, err := call("GET", path, nil, 200)
	if err != nil {
		return err
	}
	if st["done"] != true || st["outcome"] != "incorrect" || st["row"] == nil {
		return fmt.Errorf("session %s ended %v: want done, incorrect, stored", id, st)
	}
	return nil
}
