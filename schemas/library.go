package schemas

import (
	"io/fs"
	"path"
	"path/filepath"
	"strings"
)

// The task library on disk is two trees (docs/adr/0008-agent-and-verifier-trees.md):
//
//	<library>/agent/<dataset>/...      databases, CSVs, notes: what agent code may read
//	<library>/agent/AGENT_TREE.json    the agent tree's manifest (content hash)
//	<library>/verifier/<dataset>/<split>.jsonl   task files: truth, gold SQL, reference solutions
//	<library>/verifier/VERIFIER_TREE.json        the verifier tree's manifest (content hash)
//
// The sandbox-worker mounts only the agent tree and refuses a data root
// holding any file VerifierOnlyFile reports. These names are a contract
// between the task library (which writes them) and the sandbox-worker
// (which checks them), so they live here.
const (
	AgentTreeDir         = "agent"
	VerifierTreeDir      = "verifier"
	AgentManifestFile    = "AGENT_TREE.json"
	VerifierManifestFile = "VERIFIER_TREE.json"
)

// taskFileNames are the names of task files: the library's split files,
// every file upstream MedAgentGym's loaders read (tasks/upstream.go) and the
// reference outputs medgym computes beside them. They hold the answers, so
// agent code must never see them.
var taskFileNames = map[string]bool{
	"train.jsonl": true, "test.jsonl": true, "valid.jsonl": true,
	"train_tasks.jsonl": true, "valid_tasks.jsonl": true, "test_tasks.jsonl": true,
	"train_tasks_all.jsonl": true, "task.jsonl": true,
	// BioCoder's reference outputs (tasks.BioCoderOutputsFile): the stdout
	// an agent's function must reproduce.
	"medgym_reference_outputs.jsonl": true,
}

// VerifierOnlyFile reports whether a file (a slash- or OS-separated path;
// only its base name counts) is verifier-only: a task file or the verifier
// tree's manifest. A data root holding one is never mounted into a sandbox.
func VerifierOnlyFile(name string) bool {
	base := path.Base(strings.ReplaceAll(name, "\\", "/"))
	return base == VerifierManifestFile || taskFileNames[base]
}

// FindVerifierOnly walks root and returns the path of the first
// verifier-only file below it (VerifierOnlyFile), "" when there is none.
// Symbolic links are not followed.
func FindVerifierOnly(root string) (string, error) {
	var found string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && VerifierOnlyFile(d.Name()) {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	return found, err
}

// TreeHashes are the content hashes of the two library trees an episode was
// run and scored with ("sha256:<hex>"); recorded in every trajectory row.
type TreeHashes struct {
	Agent    string `json:"agent_tree_hash,omitempty"`
	Verifier string `json:"verifier_tree_hash,omitempty"`
}
