package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/medgym/medgym/schemas"
)

// validActions are the actions this sandbox executes.
var validActions = []string{schemas.ActionValidateCode, schemas.ActionTerminal, schemas.ActionRequestInfo}

// compileMark is what boot.py writes before a compile error.
const compileMark = "\x00MEDGYM_COMPILE_ERROR\n"

// installRE matches commands that try to install packages or reach the
// network; they fail fast with an explanation instead of hanging.
var installRE = regexp.MustCompile(`(?i)(^|[\s;&|(])(pip3?|python3?\s+-m\s+pip|conda|mamba|apt(-get)?|yum|dnf|apk)\s+(install|download|update|upgrade)\b`)

// PreinstalledPackages is told to agents that try to install packages.
const PreinstalledPackages = "pandas, numpy, scipy, scikit-learn, statsmodels, biopython (Python 3.11)"

func sandboxError(err error) schemas.ExecResult {
	return schemas.ExecResult{Status: schemas.StatusSandboxError, ExitCode: -1,
		Message: "Error: the sandbox failed to run the action (not a fault of the code): " + err.Error()}
}

func errorResult(msg string) schemas.ExecResult {
	return schemas.ExecResult{Status: schemas.StatusError, ExitCode: -1, Message: msg}
}

func (s *Sandbox) timeout(req schemas.ActionRequest) time.Duration {
	if req.TimeoutSec > 0 {
		return time.Duration(req.TimeoutSec) * time.Second
	}
	return s.cfg.Limits.WallTimeout
}

// mounts maps the request's resources into the sandbox (read-only).
func (s *Sandbox) mounts(res []string) ([]mount, error) {
	var out []mount
	for _, r := range res {
		clean := path.Clean("/" + r)[1:]
		if clean == "" || s.cfg.DataRoot == "" {
			return nil, fmt.Errorf("resource %q: no data root configured or empty resource", r)
		}
		host := filepath.Join(s.cfg.DataRoot, filepath.FromSlash(clean))
		real, err := filepath.EvalSymlinks(host)
		if err != nil {
			return nil, fmt.Errorf("resource %q: %w", r, err)
		}
		if real != s.cfg.DataRoot && !strings.HasPrefix(real, s.cfg.DataRoot+string(filepath.Separator)) {
			return nil, fmt.Errorf("resource %q resolves outside the data root", r)
		}
		out = append(out, mount{host: real, inside: path.Join(DataDir, clean)})
	}
	return out, nil
}

// action runs one code action (validate_code or terminal).
func (s *Sandbox) action(ctx context.Context, req schemas.ActionRequest, a schemas.Action) schemas.ExecResult {
	spec := runSpec{episode: req.Ref.EpisodeID, workspace: s.workspacePath(req.Ref.EpisodeID), timeout: s.timeout(req)}
	var code string
	switch a.Name {
	case schemas.ActionValidateCode:
		var p struct {
			Code *string `json:"code"`
		}
		if err := json.Unmarshal(a.Params, &p); err != nil || p.Code == nil {
			return errorResult(`Error: validate_code needs params {"code": "<python code>"}`)
		}
		code = *p.Code
		if req.Harness != "" {
			// Upstream splices before validate_code's own rules (str.replace).
			code = strings.ReplaceAll(req.Harness, schemas.HarnessMarker, code)
		}
		if !strings.Contains(code, "print") && strings.Contains(code, "answer") {
			code += "\nprint(answer)"
		}
		spec.code = code
	case schemas.ActionTerminal:
		var p struct {
			Cmd *string `json:"cmd"`
		}
		if err := json.Unmarshal(a.Params, &p); err != nil || p.Cmd == nil {
			return errorResult(`Error: terminal needs params {"cmd": "<shell command>"}`)
		}
		if installRE.MatchString(*p.Cmd) {
			return errorResult("Error: installing packages is not possible in this sandbox: it has no network access. " +
				"Preinstalled: " + PreinstalledPackages + ".")
		}
		spec.shell, spec.code = true, *p.Cmd
	default:
		return errorResult(fmt.Sprintf("Error: unknown action %q; valid actions are: %s", a.Name, strings.Join(validActions, ", ")))
	}
	m, err := s.mounts(req.Resources)
	if err != nil {
		return sandboxError(err)
	}
	spec.mounts = m
	lim := s.watchLimit(spec.workspace)
	rctx, stop := watchDisk(ctx, spec.workspace, lim)
	out, err := s.run.run(rctx, spec)
	stop()
	if (errors.Is(err, errDiskQuota) || errors.Is(err, errInodeQuota)) && ctx.Err() == nil {
		r := schemas.ExecResult{Status: schemas.StatusKilled, ExitCode: -1, Signal: "SIGKILL", DurationMS: out.duration.Milliseconds()}
		used, _ := walkUsage(spec.workspace, 2*lim.entries)
		if errors.Is(err, errDiskQuota) {
			r.Message = fmt.Sprintf("Process killed: the workspace grew past its disk quota of %d MiB (%d MiB used). Delete files to go on.",
				s.cfg.Limits.DiskBytes>>20, used.bytes>>20)
			return r
		}
		n := fmt.Sprint(used.entries)
		if used.full {
			n = fmt.Sprint("more than ", 2*lim.entries)
		}
		r.Message = fmt.Sprintf("Process killed: the workspace grew past its limit of %d files and directories (%s). Delete files to go on.",
			lim.entries, n)
		return r
	}
	if err != nil {
		s.log.Error("sandbox: run failed", "episode", spec.episode, "action", a.Name, "err", err)
		return sandboxError(err)
	}
	return s.result(out, spec, code)
}

// result turns a run's output into the ExecResult and upstream's message.
func (s *Sandbox) result(out runOutput, spec runSpec, code string) schemas.ExecResult {
	r := schemas.ExecResult{
		ExitCode: out.exitCode, Stdout: out.stdout, Stderr: out.stderr, Truncated: out.truncated,
		StdoutBytes: out.stdoutBytes, StderrBytes: out.stderrBytes,
		DurationMS: out.duration.Milliseconds(), PeakMemoryBytes: out.peak,
	}
	if out.signal != 0 {
		r.Signal = sigName(out.signal)
	}
	if !spec.shell && strings.HasPrefix(out.stderr, compileMark) {
		r.Status = schemas.StatusError
		r.Stderr = strings.TrimPrefix(out.stderr, compileMark)
		r.Message = fmt.Sprintf("Compilation error occurred for the code: %s\nFull traceback:\n%s", code, r.Stderr)
		return r
	}
	combined := out.stdout
	if out.stderr != "" {
		combined += "\n" + out.stderr
	}
	limit := spec.timeout.Seconds()
	switch {
	case out.timedOut:
		r.Status = schemas.StatusTimeout
		r.Message = fmt.Sprintf("Process timed out after %.1fs (timeout limit: %gs)", out.duration.Seconds(), limit)
		if combined != "" {
			r.Message += "\nOutput before the timeout:\n" + combined
		}
		return r
	case out.flood:
		r.Status = schemas.StatusKilled
		r.Message = combined + fmt.Sprintf("\nProcess killed: it wrote more than %d bytes of output.", int64(s.cfg.Limits.OutputBytes)*64)
		return r
	case out.signal == syscall.SIGXCPU || (out.signal == syscall.SIGKILL && out.duration.Seconds() >= float64(s.cfg.Limits.CPUSeconds) && !out.oom):
		r.Status = schemas.StatusTimeout
		r.Message = combined + fmt.Sprintf("\nProcess killed: CPU time limit of %ds exceeded.", s.cfg.Limits.CPUSeconds)
		return r
	case out.oom:
		r.Status = schemas.StatusKilled
		r.Message = combined + fmt.Sprintf("\nProcess killed: memory limit of %d MiB exceeded.", s.cfg.Limits.MemoryBytes>>20)
		return r
	case out.signal == syscall.SIGXFSZ:
		r.Status = schemas.StatusKilled
		r.Message = combined + fmt.Sprintf("\nProcess killed: file size limit of %d MiB exceeded.", s.cfg.Limits.FileSizeBytes>>20)
		return r
	case out.signal != 0:
		r.Status = schemas.StatusKilled
		r.Message = combined + fmt.Sprintf("\nProcess killed by signal %s.", r.Signal)
		if out.pidsHit {
			r.Message += fmt.Sprintf(" The process limit (%d) was reached.", s.cfg.Limits.Pids)
		}
		return r
	case out.exitCode != 0:
		r.Status = schemas.StatusError
		r.Message = combined
		if out.pidsHit {
			r.Message += fmt.Sprintf("\nNote: the process limit (%d) was reached.", s.cfg.Limits.Pids)
		}
		if s.quota != nil && quotaHit(combined) {
			r.Message += fmt.Sprintf("\nNote: the workspace (%s) is limited to %d MiB on disk and %d files and directories. Delete files to go on.",
				WorkDir, s.cfg.Limits.DiskBytes>>20, s.cfg.Limits.DiskInodes)
		}
		return r
	}
	r.Status = schemas.StatusOK
	r.Message = combined
	if spec.shell {
		r.Message = out.stdout
	}
	return r
}

func sigName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGSEGV: "SIGSEGV",
		syscall.SIGABRT: "SIGABRT", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGPIPE: "SIGPIPE",
		syscall.SIGBUS: "SIGBUS", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP", syscall.SIGFPE: "SIGFPE"}
	if n, ok := names[sig]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// requestInfo answers request_info from the index (no sandbox needed: the
// Go side only reads the task's own read-only tables).
func (s *Sandbox) requestInfo(req schemas.ActionRequest) schemas.ExecResult {
	var p struct {
		DataPath string `json:"data_path"`
		InfoType string `json:"info_type"`
		Keyterm  string `json:"keyterm"`
	}
	if err := json.Unmarshal(req.Action.Params, &p); err != nil {
		return errorResult(`Error: request_info needs params {"data_path": str, "info_type": "column_names|column_values|term", "keyterm": str}`)
	}
	host, err := s.dataHostPath(p.DataPath, req.Resources)
	if err != nil {
		return errorResult("Error: " + err.Error())
	}
	begin := time.Now()
	msg, err := s.index.Answer(host, p.InfoType, p.Keyterm)
	if err != nil {
		return errorResult("Error: " + err.Error())
	}
	return schemas.ExecResult{Status: schemas.StatusInfo, Message: msg, DurationMS: time.Since(begin).Milliseconds()}
}

// dataHostPath maps a data path as the agent sees it (/data/...) to the
// host, allowing only paths inside the request's resources.
func (s *Sandbox) dataHostPath(p string, resources []string) (string, error) {
	clean := path.Clean("/" + strings.TrimSpace(p))
	rel, ok := strings.CutPrefix(clean, DataDir+"/")
	if !ok {
		// Relative paths are taken as relative to /data.
		rel = strings.TrimPrefix(clean, "/")
	}
	allowed := false
	for _, r := range resources {
		rc := path.Clean("/" + r)[1:]
		if rel == rc || strings.HasPrefix(rel, rc+"/") {
			allowed = true
			break
		}
	}
	if !allowed || s.cfg.DataRoot == "" {
		return "", fmt.Errorf("data_path %q is not under a mounted resource (%s/...)", p, DataDir)
	}
	host := filepath.Join(s.cfg.DataRoot, filepath.FromSlash(rel))
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return "", fmt.Errorf("data_path %q: %w", p, os.ErrNotExist)
	}
	if real != s.cfg.DataRoot && !strings.HasPrefix(real, s.cfg.DataRoot+string(filepath.Separator)) {
		return "", fmt.Errorf("data_path %q resolves outside the data", p)
	}
	return real, nil
}
