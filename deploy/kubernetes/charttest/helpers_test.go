package charttest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// dashboard reads deploy's Grafana dashboard.
func dashboard(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../grafana/medgym-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// treeHash computes a library tree's hash the way tasks.WriteManifests
// does: the sha256 of "<file sha256>  <path>\n" lines in path order, the
// manifests left out.
func treeHash(t *testing.T, root string) string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "AGENT_TREE.json" || rel == "VERIFIER_TREE.json" {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	must(t, err)
	h := sha256.New()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		fmt.Fprintf(h, "%s  %s\n", files[p], p)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
