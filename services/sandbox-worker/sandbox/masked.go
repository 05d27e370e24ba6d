package sandbox

import (
	_ "embed"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// maskedPathsList is the one list of host paths that no sandbox may read
// (public copies of held-out task data); scripts/sandbox-image.sh reads the
// same file to delete them from the docker backend's image.
//
//go:embed masked_paths.txt
var maskedPathsList string

// maskedPathsFile names the list for messages and for the image script.
const maskedPathsFile = "services/sandbox-worker/sandbox/masked_paths.txt"

// MaskedPatterns returns the patterns of masked_paths.txt: absolute,
// clean, under /usr, in path.Match syntax. It fails on a line that is not.
func MaskedPatterns() ([]string, error) {
	var out []string
	for i, line := range strings.Split(maskedPathsList, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		_, err := path.Match(line, "/")
		if err != nil || path.Clean(line) != line || !strings.HasPrefix(line, "/usr/") || strings.Contains(line, "..") {
			return nil, fmt.Errorf("sandbox: %s line %d: %q is not a clean absolute pattern under /usr/", maskedPathsFile, i+1, line)
		}
		out = append(out, line)
	}
	return out, nil
}

// maskedPath is a host path that exists and is masked in the sandbox.
type maskedPath struct {
	path string
	dir  bool
}

// hostMasks expands the masked patterns on this host: every existing path
// they match, with symbolic links resolved (a link is masked where it
// leads, so no other link reaches the data). Targets outside /usr are not
// in a bwrap sandbox at all and are left out.
func hostMasks() ([]maskedPath, error) {
	pats, err := MaskedPatterns()
	if err != nil {
		return nil, err
	}
	var out []maskedPath
	for _, p := range pats {
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("sandbox: masked path %q: %w", p, err)
		}
		for _, m := range matches {
			real, err := filepath.EvalSymlinks(m)
			if err != nil || !strings.HasPrefix(real, "/usr/") {
				continue
			}
			fi, err := os.Stat(real)
			if err != nil {
				continue
			}
			mp := maskedPath{path: real, dir: fi.IsDir()}
			if !slices.Contains(out, mp) {
				out = append(out, mp)
			}
		}
	}
	slices.SortFunc(out, func(a, b maskedPath) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

// Placeholders in the meta directory bound over masked paths.
const (
	maskFile = "masked-empty"
	maskDir  = "masked-empty.d"
)

// writeMaskPlaceholders creates the empty file and directory that the
// bwrap backend binds over masked paths.
func writeMaskPlaceholders(meta string) error {
	if err := os.WriteFile(filepath.Join(meta, maskFile), nil, 0o444); err != nil {
		return fmt.Errorf("sandbox: mask placeholder: %w", err)
	}
	if err := os.Mkdir(filepath.Join(meta, maskDir), 0o555); err != nil {
		return fmt.Errorf("sandbox: mask placeholder: %w", err)
	}
	return nil
}

// maskArgs are bwrap's binds of the placeholders over the masked paths;
// they follow the /usr bind, which they cover.
func maskArgs(meta string, masks []maskedPath) []string {
	var a []string
	for _, m := range masks {
		src := filepath.Join(meta, maskFile)
		if m.dir {
			src = filepath.Join(meta, maskDir)
		}
		a = append(a, "--ro-bind", src, m.path)
	}
	return a
}
