// Command sandbox-worker executes agent actions in isolated sandboxes
// (bubblewrap by default, Docker optionally). See README.md.
package main

import "github.com/medgym/medgym/services/sandbox-worker/sandboxworker"

func main() { sandboxworker.Binary.Main() }
