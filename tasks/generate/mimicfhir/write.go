package mimicfhir

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/medgym/medgym/tasks"
)

//go:embed LICENSE.md
var licence []byte

// Output file names beside the NDJSON files.
const (
	LicenseFile  = "LICENSE.md"
	ManifestFile = "MANIFEST.json"
)

// Stats reports what a conversion read and wrote.
type Stats struct {
	// Counts is the number of resources written per type.
	Counts map[string]int `json:"counts"`
	// Vitals counts the vital-sign Observations among Counts["Observation"];
	// VitalsNoValue the MEDS events of a vital item without a value (left out).
	Vitals        int `json:"vitals"`
	VitalsNoValue int `json:"vitals_no_value"`
	// Sources maps each input file (relative to the demo folder; the MEDS
	// file by its base name) to its hex SHA-256.
	Sources map[string]string `json:"sources"`
	// Hash is the output's hash (Manifest.Hash).
	Hash string `json:"-"`
	// Demographics are the synthetic names and birth dates by subject_id.
	Demographics map[string]Demographics `json:"-"`
}

// Manifest is MANIFEST.json: the SHA-256 of every output file, the hash of
// the whole output (as the task library's tree manifests compute it: the
// SHA-256 of the lines "<file sha256>  <name>\n" in name order), the
// counts and the inputs' hashes.
type Manifest struct {
	Hash    string            `json:"hash"`
	Files   map[string]string `json:"files"`
	Counts  map[string]int    `json:"counts"`
	Vitals  int               `json:"vitals"`
	Sources map[string]string `json:"sources"`
}

// NDJSONFile is the file name of a resource type's NDJSON output.
func NDJSONFile(resourceType string) string { return resourceType + ".ndjson" }

// Write converts src into dir (created; files there of the same names are
// replaced): one NDJSON file per type of ResourceTypes, LICENSE.md and
// MANIFEST.json. The output depends on the input files only.
func Write(ctx context.Context, src Source, dir string) (Stats, error) {
	st := Stats{Counts: map[string]int{}, Sources: map[string]string{}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return st, fmt.Errorf("fhir output: %w", err)
	}
	files := map[string]*os.File{}
	bufs := map[string]*bufio.Writer{}
	closeAll := func() error {
		var errs []error
		for _, t := range ResourceTypes {
			if f := files[t]; f != nil {
				errs = append(errs, bufs[t].Flush(), f.Close())
				files[t] = nil
			}
		}
		return errors.Join(errs...)
	}
	defer closeAll()
	for _, t := range ResourceTypes {
		f, err := os.Create(filepath.Join(dir, NDJSONFile(t)))
		if err != nil {
			return st, fmt.Errorf("fhir output: %w", err)
		}
		files[t], bufs[t] = f, bufio.NewWriterSize(f, 1<<20)
	}
	out := func(t string, r any) error {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		st.Counts[t]++
		w := bufs[t]
		if _, err := w.Write(b); err != nil {
			return err
		}
		return w.WriteByte('\n')
	}
	if err := convert(ctx, src, out, &st); err != nil {
		return st, fmt.Errorf("convert %s: %w", src.Demo, err)
	}
	if err := closeAll(); err != nil {
		return st, fmt.Errorf("fhir output: %w", err)
	}
	if src.MEDS != "" {
		sum, err := tasks.HashFile(src.MEDS)
		if err != nil {
			return st, err
		}
		st.Sources[filepath.Base(src.MEDS)] = sum
	}
	if err := os.WriteFile(filepath.Join(dir, LicenseFile), licence, 0o644); err != nil {
		return st, fmt.Errorf("fhir output: %w", err)
	}
	m := Manifest{Files: map[string]string{}, Counts: st.Counts, Vitals: st.Vitals, Sources: st.Sources}
	names := []string{LicenseFile}
	for _, t := range ResourceTypes {
		names = append(names, NDJSONFile(t))
	}
	for _, name := range names {
		sum, err := tasks.HashFile(filepath.Join(dir, name))
		if err != nil {
			return st, err
		}
		m.Files[name] = sum
	}
	m.Hash = tasks.TreeHash(m.Files)
	st.Hash = m.Hash
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return st, err
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o644); err != nil {
		return st, fmt.Errorf("fhir output: %w", err)
	}
	return st, nil
}
