package generate

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// Generator builds one dataset's task files and data resources from the
// shared data into dir (= <LibraryDir>/<dataset>). It must be
// deterministic: same inputs and seed, byte-identical output.
type Generator func(ctx context.Context, dataRoot, dir string) error

// generators lists the generated (library) datasets explicitly.
var generators = map[string]Generator{
	"mimic_iii": generateMIMICIII,
	"eicu":      generateEICU,
	"treqs":     generateTREQS,
	"biostat":   generateBiostat,
	"npowerai":  generateNPowerAI,

	tasks.ClinicalMLDataset: generateClinicalML,
	tasks.EHRSQL2024Dataset: generateEHRSQL2024,
}

// Generate builds the named library datasets (all when names is empty)
// under libraryDir, split into its two trees: each generator writes into a
// staging folder; its task files (schemas.VerifierOnlyFile) go to
// <libraryDir>/verifier/<dataset>/, the rest (databases, CSVs, notes) to
// <libraryDir>/agent/<dataset>/. Both trees' manifests are then rewritten.
func Generate(ctx context.Context, dataRoot, libraryDir string, names []string) error {
	if len(names) == 0 {
		names = generatorNames()
	}
	for _, n := range names {
		g, ok := generators[n]
		if !ok {
			return fmt.Errorf("generate %s: %w (generated datasets: %v)", n, tasks.ErrUnknownDataset, generatorNames())
		}
		stage := filepath.Join(libraryDir, ".generate-"+n)
		if err := os.RemoveAll(stage); err != nil {
			return fmt.Errorf("generate %s: %w", n, err)
		}
		if err := os.MkdirAll(stage, 0o755); err != nil {
			return fmt.Errorf("generate %s: %w", n, err)
		}
		if err := g(ctx, dataRoot, stage); err != nil {
			return fmt.Errorf("generate %s: %w", n, err)
		}
		if err := splitTrees(stage, tasks.AgentTree(libraryDir), tasks.VerifierTree(libraryDir), n); err != nil {
			return fmt.Errorf("generate %s: %w", n, err)
		}
		if tasks.OldLayout(libraryDir, n) { // the one-tree layout's folder, answers next to the data
			if err := os.RemoveAll(filepath.Join(libraryDir, n)); err != nil {
				return fmt.Errorf("generate %s: remove the old layout: %w", n, err)
			}
		}
	}
	if _, err := tasks.WriteManifests(libraryDir); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return nil
}

// splitTrees moves the verifier-only files of stage (one dataset's output)
// to verifierRoot/name and then stage itself to agentRoot/name, replacing
// what an earlier generation left there.
func splitTrees(stage, agentRoot, verifierRoot, name string) error {
	vdir := filepath.Join(verifierRoot, name)
	if err := os.RemoveAll(vdir); err != nil {
		return err
	}
	err := filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !schemas.VerifierOnlyFile(d.Name()) {
			return err
		}
		rel, _ := filepath.Rel(stage, p)
		dst := filepath.Join(vdir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.Rename(p, dst)
	})
	if err != nil {
		return err
	}
	// The task files are derived data too: their licence travels with them.
	lics, err := filepath.Glob(filepath.Join(stage, "LICENSE*"))
	if err != nil {
		return err
	}
	for _, l := range lics {
		if _, err := os.Stat(vdir); err != nil {
			break // no task files moved
		}
		if err := tasks.CopyFile(l, filepath.Join(vdir, filepath.Base(l))); err != nil {
			return err
		}
	}
	adir := filepath.Join(agentRoot, name)
	if err := os.RemoveAll(adir); err != nil {
		return err
	}
	if err := os.MkdirAll(agentRoot, 0o755); err != nil {
		return err
	}
	return os.Rename(stage, adir)
}

func generatorNames() []string { return slices.Sorted(maps.Keys(generators)) }
