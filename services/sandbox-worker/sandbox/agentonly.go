package sandbox

import (
	"errors"
	"fmt"

	"github.com/medgym/medgym/schemas"
)

// errVerifierData says a data root holds verifier-only files.
var errVerifierData = errors.New("holds verifier-only files")

// checkAgentOnly refuses a data root that holds a verifier-only file (a task
// file with truths, gold SQL and reference solutions, or the verifier tree's
// manifest; schemas.VerifierOnlyFile) anywhere below it: whatever is under
// the data root can be mounted into a sandbox, and agent code that reads the
// answer key scores without solving anything. The task library's agent tree
// (<library>/agent) passes; the library root, its verifier tree and a raw
// upstream task folder do not (stage its agent view with `medgym tasks
// stage-upstream`). Symbolic links are not followed: mounts resolve them and
// refuse any that leaves the root.
func checkAgentOnly(root string) error {
	found, err := schemas.FindVerifierOnly(root)
	if err != nil {
		return fmt.Errorf("sandbox: data root %s: %w", root, err)
	}
	if found != "" {
		return fmt.Errorf("sandbox: data root %s %w (%s): agent code could read the answers; "+
			"give the sandbox the library's agent tree (<library>/%s) or an upstream folder's staged agent view, never the library root or task files",
			root, errVerifierData, found, schemas.AgentTreeDir)
	}
	return nil
}
