// Command trainer will turn stored trajectories into training data (SFT,
// rejection sampling, DPO pairs, GRPO batches) and drive online RL. It is a
// stub until its own issue; see README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "trainer: not implemented yet; see services/trainer/README.md")
	os.Exit(2)
}
