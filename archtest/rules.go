package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Prefix is medgym's module path prefix.
const Prefix = "github.com/medgym/medgym/"

// Package is what the rules need of one `go list` entry.
type Package struct {
	ImportPath string
	Imports    []string
}

// ListDeps runs `go list -e -deps -test` in dir on patterns and returns
// the packages, test variants included. env is added to the environment.
func ListDeps(dir string, env []string, patterns ...string) ([]Package, error) {
	args := append([]string{"list", "-e", "-deps", "-test", "-f", "{{.ImportPath}}\t{{join .Imports \",\"}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w\n%s", dir, err, stderr.String())
	}
	var pkgs []Package
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		path, imports, _ := strings.Cut(sc.Text(), "\t")
		var imps []string
		if imports != "" {
			imps = strings.Split(imports, ",") // test variants hold spaces: "p [p.test]"
		}
		pkgs = append(pkgs, Package{ImportPath: path, Imports: imps})
	}
	return pkgs, sc.Err()
}

// owner is the package a `go list -test` entry belongs to: "p [p.test]",
// "p_test [p.test]" and "p.test" all belong to p.
func owner(importPath string) string {
	p, _, _ := strings.Cut(importPath, " ")
	p = strings.TrimSuffix(p, ".test")
	return strings.TrimSuffix(p, "_test")
}

// service returns the service a package belongs to ("" for none).
func service(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, Prefix+"services/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

func inBus(pkg string) bool { return pkg == Prefix+"bus" || strings.HasPrefix(pkg, Prefix+"bus/") }

// Violation is one broken rule: From imports (or requires) To.
type Violation struct {
	Rule     string
	From, To string
}

func (v Violation) String() string { return v.Rule + ": " + v.From + " -> " + v.To }

// Rule names.
const (
	RuleNATS         = "nats-outside-bus"
	RuleCrossService = "service-imports-service"
	RuleTrainerMod   = "trainer-requires-service"
	RuleSchemasStd   = "schemas-not-stdlib"
	RuleGenerators   = "service-depends-on-generators"
)

// stdlib reports whether an import path is the standard library's (its
// first element has no dot).
func stdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// CheckImports applies the import rules to pkgs: medgym packages outside
// bus importing github.com/nats-io/..., packages of one service importing
// another's, and schemas (the wire contract) importing anything but the
// standard library. The result is sorted and without duplicates.
func CheckImports(pkgs []Package) []Violation {
	var out []Violation
	for _, p := range pkgs {
		from := owner(p.ImportPath)
		if !strings.HasPrefix(from, Prefix) {
			continue
		}
		for _, imp := range p.Imports {
			if imp = owner(imp); imp == from {
				continue // a test variant importing the package it tests
			}
			if strings.HasPrefix(imp, "github.com/nats-io/") && !inBus(from) {
				out = append(out, Violation{RuleNATS, from, imp})
			}
			if from == Prefix+"schemas" && !stdlib(imp) {
				out = append(out, Violation{RuleSchemasStd, from, imp})
			}
			if s, t := service(from), service(imp); s != "" && t != "" && s != t {
				out = append(out, Violation{RuleCrossService, from, imp})
			}
		}
	}
	return sortViolations(out)
}

// CheckTrainerRequires applies the module rule to the trainer's go.mod, as
// `go mod edit -json` prints it: no require of another service's module.
func CheckTrainerRequires(modJSON []byte) ([]Violation, error) {
	var mod struct {
		Module  struct{ Path string }
		Require []struct{ Path string }
	}
	if err := json.Unmarshal(modJSON, &mod); err != nil {
		return nil, fmt.Errorf("decode go.mod: %w", err)
	}
	var out []Violation
	for _, r := range mod.Require {
		if t := service(r.Path); t != "" && t != service(mod.Module.Path) {
			out = append(out, Violation{RuleTrainerMod, mod.Module.Path, r.Path})
		}
	}
	return sortViolations(out), nil
}

func sortViolations(v []Violation) []Violation {
	slices.SortFunc(v, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(v)
}

// generator reports whether pkg is one of the task generators or what
// only they need: tasks/generate (SQLite, the statistics), tasks/stats,
// modernc.org/sqlite, gonum.
func generator(pkg string) bool {
	for _, p := range []string{Prefix + "tasks/generate", Prefix + "tasks/stats", "modernc.org/sqlite", "gonum.org/v1/gonum"} {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

// CheckGenerators applies the generator rule to pkgs (a `go list -deps
// -test` listing): no package of a service, nor its tests, depends on the
// task generators, directly or through another package (tasks itself is
// the loaders only). It reports each service package with the first
// generator package it reaches.
func CheckGenerators(pkgs []Package) []Violation {
	imports := map[string][]string{}
	for _, p := range pkgs {
		from := owner(p.ImportPath)
		for _, imp := range p.Imports {
			imports[from] = append(imports[from], owner(imp))
		}
	}
	var out []Violation
	for _, p := range pkgs {
		from := owner(p.ImportPath)
		if service(from) == "" {
			continue
		}
		seen := map[string]bool{from: true}
		stack := []string{from}
		for len(stack) > 0 {
			cur := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if generator(cur) {
				out = append(out, Violation{RuleGenerators, from, cur})
				break
			}
			for _, next := range imports[cur] {
				if !seen[next] {
					seen[next] = true
					stack = append(stack, next)
				}
			}
		}
	}
	return sortViolations(out)
}
