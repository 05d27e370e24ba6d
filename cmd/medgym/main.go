// Command medgym is the operator CLI: it runs episodes on embedded defaults
// (an in-process JetStream server, every service in-process, the local
// sandbox, a directory or S3 trajectory store) or against running services,
// and it inspects tasks, sandboxes and stored trajectories. The commands
// live in package cli.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/medgym/medgym/cmd/medgym/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "medgym:", err)
		}
		os.Exit(1)
	}
}
