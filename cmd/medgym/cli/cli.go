// Package cli is the medgym command line: main calls Run. Its exported names
// are what the system tests (the systemtest module) drive the CLI with: the
// run flags, RunSpec and StartServices build a run exactly as `medgym run`
// does.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// Usage is the CLI's top-level help.
const Usage = `medgym: an environment for LLM agents doing biomedical data science

Usage:
  medgym run      [flags]   run episodes (embedded JetStream and services unless --nats)
  medgym serve    [flags]   run every service in one process against --nats
  medgym env      serve|views [flags]   the environment API (HTTP sessions for RL frameworks; embedded defaults unless --nats)
  medgym cancel   [--drop] [--nats URL] RUN   stop a run: publish nothing more, let episodes in flight finish (or drop them)
  medgym nats     provision|verify [--nats URL] [--replicas N]   create (as the admin user) or check the streams, buckets and durable consumers
  medgym tasks    stats|show|verify|list [flags]
  medgym sandbox  exec [flags] < code.py
  medgym sandbox  info [--backend bwrap|docker]   the isolation a run gets, probed from inside
  medgym query    --store DIR "SQL"
  medgym replay   --store DIR --run ID [flags]   re-execute a run's actions, re-score it, report changes
  medgym rescore  --store DIR --run ID [flags]   re-score a run's stored outputs with the current verifier and truths (no code runs), report flips
  medgym report   --store DIR --run ID [--out DIR]   Markdown + SVG report of a run
  medgym export   --out DIR [--dataset D] [--split S] [--format rl|harbor]   task datasets for RL frameworks (verl RL parquet, TRL/SkyRL prompts) or Harbor task folders
  medgym harbor-verify --task FILE --work DIR --out DIR   score a Harbor trial's answer with the verifier's rules (a Harbor task's tests/test.sh)
  medgym fake-llm [flags]   a fake OpenAI-compatible server (a test tool)

Run "medgym COMMAND -h" for a command's flags.
`

// Run runs the medgym command args[0] with the rest of args, as the
// binary does; -h and no command print Usage.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, Usage)
		return flag.ErrHelp
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, stdout, stderr)
	case "serve":
		return cmdServe(ctx, rest, stderr)
	case "env":
		return cmdEnv(ctx, rest, stdout, stderr)
	case "cancel":
		return cmdCancel(ctx, rest, stdout, stderr)
	case "nats":
		return cmdNATS(ctx, rest, stdout, stderr)
	case "tasks":
		return cmdTasks(ctx, rest, stdout, stderr)
	case "sandbox":
		return cmdSandbox(ctx, rest, stdout, stderr)
	case "query":
		return cmdQuery(ctx, rest, stdout, stderr)
	case "replay":
		return cmdReplay(ctx, rest, stdout, stderr)
	case "rescore":
		return cmdRescore(ctx, rest, stdout, stderr)
	case "report":
		return cmdReport(ctx, rest, stdout, stderr)
	case "export":
		return cmdExport(ctx, rest, stdout, stderr)
	case "harbor-verify":
		return cmdHarborVerify(rest, stdout, stderr)
	case "fake-llm":
		return cmdFakeLLM(ctx, rest, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, Usage)
		return nil
	}
	fmt.Fprint(stderr, Usage)
	return fmt.Errorf("unknown command %q", cmd)
}
