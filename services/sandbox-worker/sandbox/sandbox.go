package sandbox

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/internal/reqinfo"
)

//go:embed boot.py
var bootPy []byte

// metaDir is the WorkRoot subdirectory holding medgym's own files; names
// starting with "." are never workspaces.
const metaDir = ".medgym"

// rootMarker marks a WorkRoot as ours, so start-up cleaning never deletes
// a directory someone else owns.
const rootMarker = ".medgym-workroot"

// Sandbox executes actions in per-episode workspaces. It is safe for
// concurrent use; actions of one episode are serialised.
type Sandbox struct {
	cfg     Config
	log     *slog.Logger
	run     runner
	index   *reqinfo.Index
	tmpRoot bool // WorkRoot was created by New

	mu       sync.Mutex
	episodes map[string]*episode
	closed   bool
	stop     chan struct{}
	done     chan struct{}
	cgParent *cgroupParent
	results  counts
	replayed atomic.Int64
	// quota sets the workspaces' project quotas; nil when diskQuota is
	// not DiskQuotaProject.
	quota     *projectQuota
	diskQuota string
}

type episode struct {
	mu       sync.Mutex // serialises the episode's actions
	lastUsed time.Time
	ready    bool // workspace exists and holds the first applied actions
	gone     bool // released; a new entry must be made
	// applied is how many of the episode's workspace actions (the
	// request's Replay list, then its own action) the workspace holds, in
	// order; lastTurn is the turn of the last action run on it (-1: none).
	// Another worker may have run the turns in between: a request replays
	// Replay[applied:] before its own action.
	applied  int
	lastTurn int
}

// New checks the backend's prerequisites, prepares WorkRoot (removing what
// an earlier, crashed worker left there) and starts the idle reaper.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Sandbox, error) {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sandbox{cfg: cfg, log: log, index: reqinfo.NewIndex(), episodes: map[string]*episode{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.DataRoot != "" {
		abs, err := filepath.Abs(cfg.DataRoot)
		if err != nil {
			return nil, fmt.Errorf("sandbox: data root: %w", err)
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("sandbox: data root %s is not a directory", abs)
		}
		if err := checkAgentOnly(abs); err != nil {
			return nil, err
		}
		if os.Geteuid() == 0 && cfg.Backend != BackendDocker {
			// bwrap resolves mount sources as the sandbox user: a data root
			// it cannot reach would fail every action that mounts data.
			if err := traversable(filepath.Join(abs, "x")); err != nil {
				return nil, fmt.Errorf("sandbox: data root %s is not readable by uid %d (chmod o+rx it and its parents, or move it): %w", abs, sandboxUID, err)
			}
		}
		s.cfg.DataRoot = abs
	}
	if err := s.prepareWorkRoot(); err != nil {
		return nil, err
	}
	s.setupDiskQuota()
	if err := closeInheritedOnExec(); err != nil {
		return nil, err
	}
	var err error
	switch cfg.Backend {
	case BackendBwrap:
		s.run, err = s.newBwrap(ctx)
	case BackendDocker:
		s.run, err = newDockerRunner(ctx, s.cfg, log)
	default:
		err = fmt.Errorf("sandbox: unknown backend %q (want %q or %q)", cfg.Backend, BackendBwrap, BackendDocker)
	}
	if err != nil {
		s.cleanupRoot()
		return nil, err
	}
	if _, err := s.Reap(func(string) bool { return false }); err != nil {
		log.Warn("sandbox: start-up reap", "err", err)
	}
	go s.idleLoop()
	return s, nil
}

func (s *Sandbox) prepareWorkRoot() error {
	if s.cfg.WorkRoot == "" {
		d, err := os.MkdirTemp("", "medgym-sandbox-")
		if err != nil {
			return fmt.Errorf("sandbox: work root: %w", err)
		}
		s.cfg.WorkRoot, s.tmpRoot = d, true
	} else {
		abs, err := filepath.Abs(s.cfg.WorkRoot)
		if err != nil {
			return fmt.Errorf("sandbox: work root: %w", err)
		}
		s.cfg.WorkRoot = abs
		if err := os.MkdirAll(abs, 0o711); err != nil {
			return fmt.Errorf("sandbox: work root: %w", err)
		}
		ents, err := os.ReadDir(abs)
		if err != nil {
			return fmt.Errorf("sandbox: work root: %w", err)
		}
		if len(ents) > 0 {
			if _, err := os.Stat(filepath.Join(abs, rootMarker)); err != nil {
				return fmt.Errorf("sandbox: work root %s is not empty and not a medgym work root (no %s); refusing to use it", abs, rootMarker)
			}
		}
	}
	if err := os.Chmod(s.cfg.WorkRoot, 0o711); err != nil {
		return fmt.Errorf("sandbox: work root: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.cfg.WorkRoot, rootMarker), nil, 0o600); err != nil {
		return fmt.Errorf("sandbox: work root: %w", err)
	}
	meta := filepath.Join(s.cfg.WorkRoot, metaDir)
	if err := os.RemoveAll(meta); err != nil {
		return fmt.Errorf("sandbox: work root: %w", err)
	}
	if err := os.Mkdir(meta, 0o755); err != nil {
		return fmt.Errorf("sandbox: work root: %w", err)
	}
	files := map[string][]byte{
		"boot.py": bootPy,
		"passwd":  []byte("root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/work:/usr/sbin/nologin\n"),
		"group":   []byte("root:x:0:\nnogroup:x:65534:\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(meta, name), b, 0o644); err != nil {
			return fmt.Errorf("sandbox: work root: %w", err)
		}
	}
	return writeMaskPlaceholders(meta)
}

func (s *Sandbox) cleanupRoot() {
	if s.tmpRoot {
		_ = os.RemoveAll(s.cfg.WorkRoot)
	}
	if s.cgParent != nil {
		s.cgParent.remove()
	}
	if s.quota != nil {
		_ = s.quota.close()
	}
}

func (s *Sandbox) newBwrap(ctx context.Context) (runner, error) {
	bw := s.cfg.Bwrap
	if bw == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, errors.New("sandbox: bubblewrap (bwrap) not found on PATH: install it with `apt-get install bubblewrap`")
		}
		bw = p
	}
	if _, err := os.Stat(s.cfg.Python); err != nil {
		return nil, fmt.Errorf("sandbox: python %s not found: install it with `apt-get install python3 python3-pandas python3-numpy python3-scipy python3-sklearn`: %w", s.cfg.Python, err)
	}
	if !strings.HasPrefix(s.cfg.Python, "/usr/") {
		return nil, fmt.Errorf("sandbox: python %s is outside /usr, the only system directory mounted in the sandbox (use /usr/bin/python3)", s.cfg.Python)
	}
	if os.Geteuid() == 0 {
		if err := traversable(s.cfg.WorkRoot); err != nil {
			return nil, err
		}
	}
	masks, err := hostMasks()
	if err != nil {
		return nil, err
	}
	for _, m := range masks {
		s.log.Info("sandbox: masking a public copy of held-out task data", "path", m.path)
	}
	base := &bwrapBase{bwrap: bw, python: s.cfg.Python, meta: filepath.Join(s.cfg.WorkRoot, metaDir),
		limits: s.cfg.Limits, asRoot: os.Geteuid() == 0, overhead: 64 << 20, masks: masks}
	if s.cfg.DisableSeccomp {
		s.log.Warn("sandbox: seccomp filter disabled by config")
	} else {
		prog, err := buildSeccomp()
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w (Config.DisableSeccomp runs without it)", err)
		}
		base.seccomp = prog
	}
	cg, err := detectCgroups()
	switch {
	case err != nil && s.cfg.RequireCgroups:
		return nil, fmt.Errorf("sandbox: cgroup limits are required (Config.RequireCgroups) but unavailable: %w", err)
	case err != nil:
		s.log.Warn("sandbox: cgroup limits unavailable, falling back to rlimits only (shared memory and CPU share are then unbounded)", "err", err)
	default:
		s.log.Debug("sandbox: cgroup limits", "version", cg.version(), "cgroups", cg.dirs())
		base.cg, s.cgParent = cg, cg
	}
	// Smoke test: one tiny run proves bwrap works here (user namespaces etc.).
	probe := filepath.Join(s.cfg.WorkRoot, ".probe")
	_ = os.RemoveAll(probe)
	if err := makeWorkspace(probe, base.asRoot); err != nil {
		return nil, err
	}
	defer os.RemoveAll(probe)
	cold := &coldRunner{base}
	out, err := cold.run(ctx, runSpec{workspace: probe, shell: true, code: "exit 0", timeout: 30 * time.Second})
	if err != nil {
		s.cleanupRoot()
		return nil, fmt.Errorf("sandbox: bubblewrap does not work on this host (user namespaces disabled?): %w", err)
	}
	if out.exitCode != 0 {
		s.cleanupRoot()
		return nil, fmt.Errorf("sandbox: bubblewrap probe exited %d: %s", out.exitCode, out.stderr)
	}
	if s.cfg.Warm > 0 {
		return newWarmPool(base, s.cfg.WorkRoot, s.cfg.Warm, s.log), nil
	}
	return cold, nil
}

// workspacePath is the host path of an episode's workspace.
func (s *Sandbox) workspacePath(id string) string { return filepath.Join(s.cfg.WorkRoot, id) }

func (s *Sandbox) episode(id string) (*episode, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("sandbox: closed")
	}
	e, ok := s.episodes[id]
	if !ok {
		e = &episode{}
		s.episodes[id] = e
	}
	e.lastUsed = time.Now()
	return e, nil
}

// Execute runs one action of an episode. The error is non-nil only for
// requests that cannot be handled at all (invalid episode id, closed
// sandbox); everything else, including sandbox failures, is an ExecResult.
func (s *Sandbox) Execute(ctx context.Context, req schemas.ActionRequest) (schemas.ExecResult, error) {
	id := req.Ref.EpisodeID
	if !schemas.ValidToken(id) {
		return schemas.ExecResult{}, fmt.Errorf("sandbox execute: episode id %q is not a valid token", id)
	}
	for {
		e, err := s.episode(id)
		if err != nil {
			return schemas.ExecResult{}, err
		}
		e.mu.Lock()
		if e.gone {
			e.mu.Unlock()
			continue
		}
		res := s.executeLocked(ctx, e, req)
		s.results.add(res.Status)
		e.lastUsed = time.Now()
		e.mu.Unlock()
		return res, nil
	}
}

func (s *Sandbox) executeLocked(ctx context.Context, e *episode, req schemas.ActionRequest) schemas.ExecResult {
	switch req.Action.Name {
	case schemas.ActionRequestInfo:
		return s.requestInfo(req)
	case schemas.ActionValidateCode, schemas.ActionTerminal:
	default:
		return s.action(ctx, req, req.Action) // refused; never touches the workspace
	}
	if r, ok := s.catchUp(ctx, e, req); !ok {
		return r
	}
	r := s.action(ctx, req, req.Action)
	e.applied, e.lastTurn = len(req.Replay)+1, req.Ref.Turn
	if req.Action.Name == schemas.ActionValidateCode && r.Status == schemas.StatusOK && len(req.OutputFiles) > 0 {
		var notes []string
		r.Files, notes = readOutputFiles(s.workspacePath(req.Ref.EpisodeID), req.OutputFiles)
		for _, n := range notes {
			r.Message += "\nNote: " + n
		}
	}
	return r
}

// catchUp brings the episode's workspace to the state right before req's
// action: the episode's earlier workspace actions (req.Replay), all of them
// and nothing else. A workspace this worker has never had is made and
// replayed from the start; one that holds a prefix of them (other workers
// ran the turns since) replays the missing suffix; one that already ran
// the request's turn or a later one (a redelivery) is made again. A caller
// that sends no Replay but increasing turns (one process driving a whole
// episode) gets the workspace as it is. It returns false with the result
// to report when that failed.
func (s *Sandbox) catchUp(ctx context.Context, e *episode, req schemas.ActionRequest) (schemas.ExecResult, bool) {
	id, path := req.Ref.EpisodeID, s.workspacePath(req.Ref.EpisodeID)
	if e.ready && req.Ref.Turn <= e.lastTurn && e.applied > len(req.Replay) {
		s.log.Info("sandbox: rebuilding a workspace that is ahead of the request (redelivered action)",
			"episode", id, "turn", req.Ref.Turn, "last_turn", e.lastTurn, "applied", e.applied, "replay", len(req.Replay))
		e.ready = false
	}
	if !e.ready {
		if _, err := os.Lstat(path); err == nil {
			// Left by an earlier failure or ahead of the request: its
			// contents are not known to match any prefix.
			s.run.release(id)
			if err := os.RemoveAll(path); err != nil {
				return sandboxError(fmt.Errorf("remove stale workspace: %w", err)), false
			}
		}
		m, err := s.mounts(req.Resources)
		if err != nil {
			return sandboxError(err), false
		}
		if err := s.run.prepare(id, path, m); err != nil {
			return sandboxError(err), false
		}
		e.ready, e.applied, e.lastTurn = true, 0, -1
	}
	for i := e.applied; i < len(req.Replay); i++ {
		r := s.action(ctx, req, req.Replay[i])
		s.replayed.Add(1)
		if r.Status == schemas.StatusSandboxError {
			e.ready = false // the next request starts over
			r.Message = fmt.Sprintf("workspace rebuild failed at replayed action %d: %s", i, r.Message)
			return r, false
		}
		e.applied = i + 1
	}
	return schemas.ExecResult{}, true
}

// Release removes the episode's workspace and stops any process of it.
func (s *Sandbox) Release(episodeID string) error {
	if !schemas.ValidToken(episodeID) {
		return fmt.Errorf("sandbox release: episode id %q is not a valid token", episodeID)
	}
	s.mu.Lock()
	e := s.episodes[episodeID]
	delete(s.episodes, episodeID)
	s.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.gone = true
	}
	s.run.release(episodeID)
	if err := os.RemoveAll(s.workspacePath(episodeID)); err != nil {
		return fmt.Errorf("sandbox release %s: %w", episodeID, err)
	}
	return nil
}

// Reap removes every workspace (and backend resource) whose episode is not
// live, and returns how many it removed.
func (s *Sandbox) Reap(live func(episodeID string) bool) (int, error) {
	ents, err := os.ReadDir(s.cfg.WorkRoot)
	if err != nil {
		return 0, fmt.Errorf("sandbox reap: %w", err)
	}
	removed := 0
	var errs []error
	for _, ent := range ents {
		name := ent.Name()
		if strings.HasPrefix(name, ".") || !ent.IsDir() || live(name) {
			continue
		}
		if err := s.Release(name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	n, err := s.run.reap(live)
	if err != nil {
		errs = append(errs, err)
	}
	if removed == 0 {
		removed = n
	}
	return removed, errors.Join(errs...)
}

func (s *Sandbox) idleLoop() {
	defer close(s.done)
	every := min(max(s.cfg.IdleTTL/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.reapIdle()
		}
	}
}

func (s *Sandbox) reapIdle() {
	cutoff := time.Now().Add(-s.cfg.IdleTTL)
	var idle []string
	s.mu.Lock()
	for id, e := range s.episodes {
		if e.mu.TryLock() {
			if e.lastUsed.Before(cutoff) {
				idle = append(idle, id)
			}
			e.mu.Unlock()
		}
	}
	s.mu.Unlock()
	for _, id := range idle {
		if err := s.Release(id); err != nil {
			s.log.Warn("sandbox: idle release", "episode", id, "err", err)
		} else {
			s.log.Info("sandbox: released idle workspace", "episode", id)
		}
	}
}

// Close stops every sandbox process and removes all workspaces.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	var errs []error
	ids := []string{}
	s.mu.Lock()
	for id := range s.episodes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		if err := s.Release(id); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.run.close(); err != nil {
		errs = append(errs, err)
	}
	if s.tmpRoot {
		if err := os.RemoveAll(s.cfg.WorkRoot); err != nil {
			errs = append(errs, fmt.Errorf("sandbox close: %w", err))
		}
	}
	if s.cgParent != nil {
		s.cgParent.remove()
	}
	if s.quota != nil {
		if err := s.quota.close(); err != nil {
			errs = append(errs, fmt.Errorf("sandbox close: %w", err))
		}
	}
	return errors.Join(errs...)
}

// traversable checks that the sandbox user (which bwrap runs as when the
// worker is root) can reach dir: every parent needs the x bit for others.
func traversable(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("sandbox: work root: %w", err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("sandbox: work root %s is not reachable by uid %d: %s has mode %v (chmod o+x it or pick another WorkRoot)", dir, sandboxUID, d, st.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
