// Command medgym is the operator CLI: it runs episodes on embedded defaults
// (an in-process JetStream server, every service in-process, the local
// sandbox, a directory or S3 trajectory store) or against running services,
// and it inspects tasks, sandboxes and stored trajectories. The commands
// live in package cli.
package main

import (
	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
)

func main() {
	cli.Standalone = true
	bus.CommandMain("medgym", cli.Run)
}
