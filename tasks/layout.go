package tasks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/medgym/medgym/schemas"
)

// The library's two trees (docs/adr/0008-agent-and-verifier-trees.md): the
// agent tree holds what agent code may read and is the only one a sandbox
// mounts; the verifier tree holds the task files (truth, gold SQL, reference
// solutions) that the loaders, the verifier and the reference policy read.

// AgentTree is the agent tree of the library at lib.
func AgentTree(lib string) string { return filepath.Join(lib, schemas.AgentTreeDir) }

// VerifierTree is the verifier tree of the library at lib.
func VerifierTree(lib string) string { return filepath.Join(lib, schemas.VerifierTreeDir) }

// Manifest lists a tree's files with their SHA-256 and the tree's hash.
type Manifest struct {
	Tree string `json:"tree"` // schemas.AgentTreeDir or schemas.VerifierTreeDir
	// Hash is "sha256:" + the SHA-256 of the lines "<file sha256>  <path>\n"
	// over Files in path order (what `sha256sum` prints for the tree).
	Hash  string            `json:"hash"`
	Files map[string]string `json:"files"` // slash path relative to the tree → hex SHA-256
}

// HashFile returns the hex SHA-256 of a file.
func HashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// TreeHash is the hash of a file list (path → hex SHA-256): "sha256:" +
// the SHA-256 of the lines "<file sha256>  <path>\n" in path order.
func TreeHash(files map[string]string) string {
	h := sha256.New()
	for _, p := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s  %s\n", files[p], p)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// buildManifest hashes every regular file under root that keep accepts
// (nil: all), except the two manifest files.
func buildManifest(tree, root string, keep func(rel string) bool) (Manifest, error) {
	m := Manifest{Tree: tree, Files: map[string]string{}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		if rel == schemas.AgentManifestFile || rel == schemas.VerifierManifestFile || (keep != nil && !keep(rel)) {
			return nil
		}
		sum, err := HashFile(p)
		if err != nil {
			return err
		}
		m.Files[rel] = sum
		return nil
	})
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest of %s: %w", root, err)
	}
	m.Hash = TreeHash(m.Files)
	return m, nil
}

// writeManifest writes m as root/name.
func writeManifest(root, name string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, name), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	return nil
}

// WriteManifests hashes both trees of the library at lib and writes their
// manifests (agent/AGENT_TREE.json, verifier/VERIFIER_TREE.json). It
// refuses an agent tree that holds a verifier-only file.
func WriteManifests(lib string) (schemas.TreeHashes, error) {
	agent, err := buildManifest(schemas.AgentTreeDir, AgentTree(lib), nil)
	if err != nil {
		return schemas.TreeHashes{}, err
	}
	for p := range agent.Files {
		if schemas.VerifierOnlyFile(p) {
			return schemas.TreeHashes{}, fmt.Errorf("agent tree %s holds the verifier-only file %s", AgentTree(lib), p)
		}
	}
	ver, err := buildManifest(schemas.VerifierTreeDir, VerifierTree(lib), nil)
	if err != nil {
		return schemas.TreeHashes{}, err
	}
	if err := writeManifest(AgentTree(lib), schemas.AgentManifestFile, agent); err != nil {
		return schemas.TreeHashes{}, err
	}
	if err := writeManifest(VerifierTree(lib), schemas.VerifierManifestFile, ver); err != nil {
		return schemas.TreeHashes{}, err
	}
	return schemas.TreeHashes{Agent: agent.Hash, Verifier: ver.Hash}, nil
}

// readManifest reads root/name.
func readManifest(root, name string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", filepath.Join(root, name), err)
	}
	return m, nil
}

// LibraryHashes returns the hashes recorded in the manifests of the library
// at lib (as written by Generate). A tree without a manifest (no library,
// or only MedCalc-Bench, which needs none) has an empty hash.
func LibraryHashes(lib string) (schemas.TreeHashes, error) {
	var h schemas.TreeHashes
	for _, t := range []struct {
		root, name string
		dst        *string
	}{{AgentTree(lib), schemas.AgentManifestFile, &h.Agent}, {VerifierTree(lib), schemas.VerifierManifestFile, &h.Verifier}} {
		m, err := readManifest(t.root, t.name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return schemas.TreeHashes{}, fmt.Errorf("library hashes: %w", err)
		}
		*t.dst = m.Hash
	}
	return h, nil
}

// StageUpstream builds the agent view of an upstream task folder in dst:
// every file of tasksDir except the task files (schemas.VerifierOnlyFile),
// hard-linked where dst is on the same file system, else copied; and its
// manifest. It returns the hashes of the view (agent) and of the task files
// left behind (verifier). dst is replaced.
func StageUpstream(tasksDir, dst string) (schemas.TreeHashes, error) {
	src, err := filepath.Abs(tasksDir)
	if err != nil {
		return schemas.TreeHashes{}, fmt.Errorf("stage upstream: %w", err)
	}
	abs, err := filepath.Abs(dst)
	if err != nil {
		return schemas.TreeHashes{}, fmt.Errorf("stage upstream: %w", err)
	}
	inside := func(a, b string) bool { return a == b || strings.HasPrefix(a, b+string(filepath.Separator)) }
	if inside(abs, src) || inside(src, abs) { // dst is replaced: it must not hold the task folder either
		return schemas.TreeHashes{}, fmt.Errorf("stage upstream: the agent view %s and the task folder %s must not contain each other", dst, tasksDir)
	}
	if err := os.RemoveAll(dst); err != nil {
		return schemas.TreeHashes{}, fmt.Errorf("stage upstream: %w", err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return schemas.TreeHashes{}, fmt.Errorf("stage upstream: %w", err)
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case !d.Type().IsRegular(), schemas.VerifierOnlyFile(d.Name()):
			return nil // links could point back at the task files
		}
		if err := os.Link(p, out); err == nil {
			return nil
		}
		return CopyFile(p, out)
	})
	if err != nil {
		return schemas.TreeHashes{}, fmt.Errorf("stage upstream %s: %w", tasksDir, err)
	}
	agent, err := buildManifest(schemas.AgentTreeDir, dst, nil)
	if err != nil {
		return schemas.TreeHashes{}, err
	}
	if err := writeManifest(dst, schemas.AgentManifestFile, agent); err != nil {
		return schemas.TreeHashes{}, err
	}
	ver, err := buildManifest(schemas.VerifierTreeDir, src, schemas.VerifierOnlyFile)
	if err != nil {
		return schemas.TreeHashes{}, err
	}
	return schemas.TreeHashes{Agent: agent.Hash, Verifier: ver.Hash}, nil
}

// UpstreamHashes returns the hashes of an upstream task folder as
// StageUpstream computes them, without staging: the task files (verifier)
// and everything else (agent).
func UpstreamHashes(tasksDir string) (schemas.TreeHashes, error) {
	agent, err := buildManifest(schemas.AgentTreeDir, tasksDir, func(rel string) bool { return !schemas.VerifierOnlyFile(rel) })
	if err != nil {
		return schemas.TreeHashes{}, err
	}
	ver, err := buildManifest(schemas.VerifierTreeDir, tasksDir, schemas.VerifierOnlyFile)
	if err != nil {
		return schemas.TreeHashes{}, err
	}
	return schemas.TreeHashes{Agent: agent.Hash, Verifier: ver.Hash}, nil
}

// CopyFile copies a file without holding it in memory (upstream data
// can be large).
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// OldLayout reports whether lib holds a library generated before the split
// (<lib>/<dataset>/<split>.jsonl next to the data).
func OldLayout(lib, dataset string) bool {
	_, err := os.Stat(filepath.Join(lib, dataset, "test.jsonl"))
	return err == nil
}
