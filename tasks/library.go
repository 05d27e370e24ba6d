package tasks

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/medgym/medgym/schemas"
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

	ClinicalMLDataset: generateClinicalML,
	EHRSQL2024Dataset: generateEHRSQL2024,
}

// ErrNoLibrary says the task library has not been generated.
var ErrNoLibrary = errors.New("task library not generated")

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
			return fmt.Errorf("generate %s: %w (generated datasets: %v)", n, ErrUnknownDataset, generatorNames())
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
		if err := splitTrees(stage, AgentTree(libraryDir), VerifierTree(libraryDir), n); err != nil {
			return fmt.Errorf("generate %s: %w", n, err)
		}
		if oldLayout(libraryDir, n) { // the one-tree layout's folder, answers next to the data
			if err := os.RemoveAll(filepath.Join(libraryDir, n)); err != nil {
				return fmt.Errorf("generate %s: remove the old layout: %w", n, err)
			}
		}
	}
	if _, err := WriteManifests(libraryDir); err != nil {
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
		if err := copyStream(l, filepath.Join(vdir, filepath.Base(l))); err != nil {
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

// WriteTasks writes ts as JSON lines to path (one Task per line), the
// format loadLibrary reads.
func WriteTasks(path string, ts []Task) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write tasks: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range ts {
		if err := enc.Encode(&ts[i]); err != nil {
			_ = f.Close()
			return fmt.Errorf("write tasks %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write tasks %s: %w", path, err)
	}
	return f.Close()
}

// loadLibrary reads <LibraryDir>/verifier/<dataset>/<split>.jsonl.
func loadLibrary(ctx context.Context, src Source) ([]Task, error) {
	if src.LibraryDir == "" {
		return nil, fmt.Errorf("%w: dataset %s needs --library (run `make library`)", ErrNoLibrary, src.Dataset)
	}
	path := filepath.Join(VerifierTree(src.LibraryDir), src.Dataset, src.Split+".jsonl")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && oldLayout(src.LibraryDir, src.Dataset) {
		return nil, fmt.Errorf("%w: %s has the old one-tree layout (task files next to the data, readable by agent code); regenerate it (`make library`)", ErrNoLibrary, src.LibraryDir)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s is missing (run `make library` or `medgym tasks generate --library %s`)", ErrNoLibrary, path, src.LibraryDir)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Task
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var t Task
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if err := t.View.Validate(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}
