package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
)

// cmdSandbox: `medgym sandbox exec [--backend B] [--data DIR] [--timeout S] < code.py`
// and `medgym sandbox info [--backend B]`.
func cmdSandbox(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "info" {
		return cmdSandboxInfo(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "exec" {
		return fmt.Errorf("usage: medgym sandbox exec [--backend bwrap|docker] [--data DIR] [--timeout S] [--action validate_code|terminal] < code\n       medgym sandbox info [--backend bwrap|docker] [--require-cgroups]")
	}
	fs := flag.NewFlagSet("sandbox exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backend := fs.String("backend", "bwrap", "bwrap or docker")
	data := fs.String("data", "", "a directory mounted read-only at /data/<its name>")
	timeout := fs.Int("timeout", 120, "seconds")
	action := fs.String("action", schemas.ActionValidateCode, "validate_code (Python) or terminal (shell)")
	memMB := fs.Int("memory-mb", 2048, "memory limit")
	warm := fs.Int("warm", 0, "warm interpreters")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	src, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("read code from stdin: %w", err)
	}
	cfg := sandbox.Config{Backend: *backend, Warm: *warm, Limits: sandbox.Limits{MemoryBytes: int64(*memMB) << 20}}
	var res []string
	if *data != "" {
		abs, err := filepath.Abs(*data)
		if err != nil {
			return err
		}
		cfg.DataRoot = filepath.Dir(abs)
		res = []string{filepath.Base(abs)}
	}
	key := "code"
	if *action == schemas.ActionTerminal {
		key = "cmd"
	}
	params, _ := json.Marshal(map[string]string{key: string(src)})
	req := schemas.ActionRequest{
		Ref:    schemas.EpisodeRef{RunID: "cli", EpisodeID: fmt.Sprintf("exec-%d", os.Getpid()), TaskID: "cli", Dataset: "cli"},
		Action: schemas.Action{Name: *action, Params: params}, Resources: res, TimeoutSec: *timeout,
	}
	out, err := sandbox.Exec(ctx, cfg, req, NewLogger(stderr, "warn"))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// infoProbe runs inside the sandbox and reports what the code there sees.
const infoProbe = `import json, os, socket, resource
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
env = sorted(os.environ)
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "seccomp": int(status["Seccomp"].strip()), "no_new_privs": int(status["NoNewPrivs"].strip()),
    "cap_eff": status["CapEff"].strip(),
    "net_interfaces": [n for _, n in socket.if_nameindex()],
    "pid_1": open("/proc/1/cmdline").read().split("\0")[0],
    "writable": [d for d in ("/", "/usr", "/etc", "/data", "/work", "/tmp") if os.path.isdir(d) and os.access(d, os.W_OK)],
    "env": env,
    "rlimit_as_data_mib": resource.getrlimit(resource.RLIMIT_DATA)[0] >> 20,
    "rlimit_nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
}))`

// sandboxInfo is what `medgym sandbox info` prints.
type sandboxInfo struct {
	Backend string `json:"backend"`
	Limits  string `json:"limits"`
	// DiskQuota is what bounds a workspace on disk: project, watcher or off.
	DiskQuota string         `json:"disk_quota"`
	Seccomp   bool           `json:"seccomp"`
	Probe     map[string]any `json:"probe"`
	// Warnings name what falls short of the strict setup.
	Warnings []string `json:"warnings,omitempty"`
}

// cmdSandboxInfo starts a sandbox as the worker would, runs a probe inside
// it, and prints what isolation is in force: a check before a deployment.
func cmdSandboxInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox info", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backend := fs.String("backend", "bwrap", "bwrap or docker")
	requireCg := fs.Bool("require-cgroups", false, "fail, as the worker would, when runs cannot get their own cgroups")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sb, err := sandbox.New(ctx, sandbox.Config{Backend: *backend, RequireCgroups: *requireCg}, NewLogger(stderr, "warn"))
	if err != nil {
		return err
	}
	defer sb.Close()
	params, _ := json.Marshal(map[string]string{"code": infoProbe})
	ep := fmt.Sprintf("info-%d", os.Getpid())
	res, err := sb.Execute(ctx, schemas.ActionRequest{
		Ref:    schemas.EpisodeRef{RunID: "cli", EpisodeID: ep, TaskID: "cli", Dataset: "cli"},
		Action: schemas.Action{Name: schemas.ActionValidateCode, Params: params}, TimeoutSec: 60,
	})
	if err != nil {
		return err
	}
	if res.Status != schemas.StatusOK {
		return fmt.Errorf("sandbox info: the probe did not run: %s: %s", res.Status, res.Message)
	}
	st := sb.Stats()
	info := sandboxInfo{Backend: st.Backend, Limits: st.Limits, DiskQuota: st.DiskQuota, Seccomp: st.Seccomp}
	if err := json.Unmarshal([]byte(res.Stdout), &info.Probe); err != nil {
		return fmt.Errorf("sandbox info: probe output %q: %w", res.Stdout, err)
	}
	if st.Limits == "rlimits" {
		info.Warnings = append(info.Warnings, "no per-run cgroups: shared memory and CPU share are unbounded (see --require-cgroups and SANDBOX.md)")
	}
	if st.DiskQuota == "off" {
		info.Warnings = append(info.Warnings, "no workspace disk quota")
	}
	if !st.Seccomp {
		info.Warnings = append(info.Warnings, "seccomp filter off")
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(info)
}
