package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/medgym/medgym/schemas"
	sandboxworker "github.com/medgym/medgym/services/sandbox-worker/service"
)

// cmdSandbox: `medgym sandbox exec [--backend B] [--data DIR] [--timeout S] < code.py`.
func cmdSandbox(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "exec" {
		return fmt.Errorf("usage: medgym sandbox exec [--backend bwrap|docker] [--data DIR] [--timeout S] [--action validate_code|terminal] < code")
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
	cfg := sandboxworker.SandboxConfig{Backend: *backend, Warm: *warm, Limits: sandboxworker.Limits{MemoryBytes: int64(*memMB) << 20}}
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
	out, err := sandboxworker.Exec(ctx, cfg, req, newLogger(stderr, "warn"))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
