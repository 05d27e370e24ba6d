// Command verifier checks code executions against the ground truth,
// scores finished episodes and writes their trajectories to the store.
// See README.md.
package main

import "github.com/medgym/medgym/services/verifier/verifier"

func main() { verifier.Binary.Main() }
