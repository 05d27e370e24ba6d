// Package catalog holds the task views the environment server offers,
// read from a views directory: <dir>/<dataset>/<split>.views.jsonl, one
// schemas.TaskView per line. Views are what the agent may see; the
// directory holds no ground truth, and a directory that does (a verifier
// tree, task files, a line with more than a view's fields) is refused.
package catalog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/env/internal/session"
)

// Suffix ends a views file's name: <split>.views.jsonl.
const Suffix = ".views.jsonl"

// Catalog is an in-memory session.Catalog.
type Catalog struct {
	all      []schemas.TaskView // dataset, split, file order
	byID     map[string][]int
	datasets []string
}

// Path is where the views of dataset and split live under dir.
func Path(dir, dataset, split string) string {
	return filepath.Join(dir, dataset, split+Suffix)
}

// Write writes views as dataset/split's views file under dir.
func Write(dir, dataset, split string, views []schemas.TaskView) error {
	p := Path(dir, dataset, split)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("write views: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, v := range views {
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("write views of %s/%s: %w", dataset, split, err)
		}
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write views: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("write views: %w", err)
	}
	return nil
}

// Open reads every views file under dir.
func Open(dir string) (*Catalog, error) {
	if bad, err := schemas.FindVerifierOnly(dir); err != nil {
		return nil, fmt.Errorf("task views %s: %w", dir, err)
	} else if bad != "" {
		return nil, fmt.Errorf("task views %s: %s is a verifier-only file (ground truth); give the server a views directory (medgym env views --out DIR), never the library or its verifier tree", dir, bad)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*", "*"+Suffix))
	if err != nil {
		return nil, fmt.Errorf("task views %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("task views %s: no <dataset>/<split>%s file", dir, Suffix)
	}
	sort.Strings(files)
	c := &Catalog{byID: map[string][]int{}}
	for _, f := range files {
		if err := c.read(f); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Catalog) read(path string) error {
	dataset := filepath.Base(filepath.Dir(path))
	split := strings.TrimSuffix(filepath.Base(path), Suffix)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("task views: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields() // a task line (view, truth, reference) is refused
		var v schemas.TaskView
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("task views %s:%d: not a task view: %w", path, n, err)
		}
		if err := v.Validate(); err != nil {
			return fmt.Errorf("task views %s:%d: %w", path, n, err)
		}
		if v.Dataset != dataset || v.Split != split {
			return fmt.Errorf("task views %s:%d: task %s is %s/%s, not %s/%s", path, n, v.ID, v.Dataset, v.Split, dataset, split)
		}
		c.byID[v.ID] = append(c.byID[v.ID], len(c.all))
		c.all = append(c.all, v)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("task views %s: %w", path, err)
	}
	if !slices.Contains(c.datasets, dataset) {
		c.datasets = append(c.datasets, dataset)
	}
	return nil
}

// Datasets lists the datasets held, sorted.
func (c *Catalog) Datasets() []string { return slices.Sorted(slices.Values(c.datasets)) }

// Find returns the task with id.
func (c *Catalog) Find(id, dataset, split string) (schemas.TaskView, error) {
	var hits []schemas.TaskView
	for _, i := range c.byID[id] {
		v := c.all[i]
		if (dataset == "" || v.Dataset == dataset) && (split == "" || v.Split == split) {
			hits = append(hits, v)
		}
	}
	switch len(hits) {
	case 0:
		return schemas.TaskView{}, fmt.Errorf("%w %q (dataset %q, split %q): GET /v1/tasks lists the tasks offered", session.ErrUnknownTask, id, dataset, split)
	case 1:
		return hits[0], nil
	}
	return schemas.TaskView{}, fmt.Errorf("%w: %q is in %d dataset/split pairs; name dataset and split", session.ErrAmbiguousTask, id, len(hits))
}

// List returns a page of the tasks of dataset and split.
func (c *Catalog) List(dataset, split string, limit, offset int) ([]schemas.TaskView, int, error) {
	if dataset != "" && !slices.Contains(c.datasets, dataset) {
		return nil, 0, fmt.Errorf("%w %q (offered: %s)", session.ErrUnknownDataset, dataset, strings.Join(c.Datasets(), ", "))
	}
	out := []schemas.TaskView{}
	total := 0
	for _, v := range c.all {
		if (dataset != "" && v.Dataset != dataset) || (split != "" && v.Split != split) {
			continue
		}
		if total >= offset && len(out) < limit {
			out = append(out, v)
		}
		total++
	}
	return out, total, nil
}
