// Command medgym is the operator CLI: it runs episodes on embedded defaults
// (an in-process JetStream server, every service in-process, the local
// sandbox, a directory or S3 trajectory store) or against running services,
// and it inspects tasks, sandboxes and stored trajectories.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `medgym: an environment for LLM agents doing biomedical data science

Usage:
  medgym run      [flags]   run episodes (embedded JetStream and services unless --nats)
  medgym serve    [flags]   run every service in one process against --nats
  medgym env      serve|views [flags]   the environment API (HTTP sessions for RL frameworks; embedded defaults unless --nats)
  medgym cancel   [--drop] [--nats URL] RUN   stop a run: publish nothing more, let episodes in flight finish (or drop them)
  medgym tasks    stats|show|verify|list [flags]
  medgym sandbox  exec [flags] < code.py
  medgym sandbox  info [--backend bwrap|docker]   the isolation a run gets, probed from inside
  medgym query    --store DIR "SQL"
  medgym replay   --store DIR --run ID [flags]   re-execute a run's actions, re-score it, report changes
  medgym report   --store DIR --run ID [--out DIR]   Markdown + SVG report of a run
  medgym export   --out DIR [--dataset D] [--split S]   task datasets for RL frameworks: verl RL parquet, TRL/SkyRL prompts
  medgym fake-llm [flags]   a fake OpenAI-compatible server (a test tool)

Run "medgym COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "medgym:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
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
	case "tasks":
		return cmdTasks(ctx, rest, stdout, stderr)
	case "sandbox":
		return cmdSandbox(ctx, rest, stdout, stderr)
	case "query":
		return cmdQuery(ctx, rest, stdout, stderr)
	case "replay":
		return cmdReplay(ctx, rest, stdout, stderr)
	case "report":
		return cmdReport(ctx, rest, stdout, stderr)
	case "export":
		return cmdExport(ctx, rest, stdout, stderr)
	case "fake-llm":
		return cmdFakeLLM(ctx, rest, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}
