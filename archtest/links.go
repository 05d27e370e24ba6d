package archtest

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// BrokenLink is a relative Markdown link whose file, directory or heading
// anchor does not exist.
type BrokenLink struct {
	File   string // the Markdown file, relative to the root
	Line   int
	Target string
	Reason string
}

func (b BrokenLink) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", b.File, b.Line, b.Target, b.Reason)
}

// skipDirs are folders whose Markdown is not the project's documentation.
var skipDirs = map[string]bool{".git": true, "build": true, "node_modules": true, "testdata": true, "bin": true}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeRE    = regexp.MustCompile("`[^`]*`")
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// CheckLinks reads every Markdown file under root (outside skipDirs,
// virtual environments and egg-info folders) and returns its relative
// links that point nowhere: a missing file or directory, or an anchor
// (#heading) that no heading of the target Markdown file makes. Links in
// code (fenced blocks, inline code) and absolute URLs are not checked.
func CheckLinks(root string) ([]BrokenLink, error) {
	var broken []BrokenLink
	anchors := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (skipDirs[name] || strings.HasPrefix(name, ".venv") || strings.HasSuffix(name, ".egg-info")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".md") {
			return nil
		}
		links, err := markdownLinks(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, l := range links {
			if reason := checkLink(path, l.target, anchors); reason != "" {
				broken = append(broken, BrokenLink{File: rel, Line: l.line, Target: l.target, Reason: reason})
			}
		}
		return nil
	})
	return broken, err
}

type mdLink struct {
	line   int
	target string
}

// markdownLinks returns the link targets of a Markdown file outside code.
func markdownLinks(path string) ([]mdLink, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mdLink
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fenced := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			out = append(out, mdLink{line: n, target: m[1]})
		}
	}
	return out, sc.Err()
}

// checkLink returns why target, linked from file, is broken ("" if not).
func checkLink(file, target string, anchors map[string]map[string]bool) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "/") {
		return ""
	}
	pathPart, anchor, _ := strings.Cut(target, "#")
	dest := file
	if pathPart != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(pathPart))
	}
	info, err := os.Stat(dest)
	if err != nil {
		return "no such file or directory"
	}
	if anchor == "" || info.IsDir() || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	set, ok := anchors[dest]
	if !ok {
		set, err = headingAnchors(dest)
		if err != nil {
			return err.Error()
		}
		anchors[dest] = set
	}
	if !set[strings.ToLower(anchor)] {
		return "no heading makes the anchor #" + anchor
	}
	return ""
}

// headingAnchors returns the anchors GitHub makes for a Markdown file's
// headings: lower case, punctuation dropped, spaces as hyphens, a repeated
// one suffixed -1, -2, ...
func headingAnchors(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			set[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			set[s] = true
		}
		seen[s]++
	}
	return set, nil
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
