package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where a results file was measured: what figures depend
// on, so a figure is never read without it.
type machine struct {
	CPU     string // model name
	Cores   int    // runtime.NumCPU
	Memory  string // MemTotal
	Kernel  string
	Go      string
	Load    string // load averages when the run started
	Commit  string // HEAD, "+dirty" when the tree has changes
	Started time.Time
}

// describeMachine reads the machine's facts (Linux: /proc) and the
// checkout's commit at root.
func describeMachine(root string) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Started: time.Now().UTC()}
	m.CPU = procField("/proc/cpuinfo", "model name")
	m.Memory = procField("/proc/meminfo", "MemTotal")
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	m.Commit = "unknown"
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
			m.Commit += "+dirty"
		}
	}
	return m
}

// procField is the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// writeHeader starts a results file: what was run, where and when.
func writeHeader(w io.Writer, m machine, args []string) error {
	_, err := fmt.Fprintf(w, "# Benchmark results\n\n"+
		"Written by `go run ./bench` (the harness); do not edit by hand. Compare ratios across machines, absolute figures only on the same one.\n\n"+
		"| | |\n|---|---|\n"+
		"| date (UTC) | %s |\n| commit | %s |\n| command | `go run ./bench %s` |\n"+
		"| CPU | %s, %d cores (runtime.NumCPU) |\n| memory | %s |\n| kernel | %s |\n| Go | %s |\n| load average at start | %s |\n\n"+
		"| suite | figure | value | measured |\n|---|---|---|---|\n",
		m.Started.Format(time.RFC3339), m.Commit, strings.Join(args, " "), m.CPU, m.Cores, m.Memory, m.Kernel, m.Go, m.Load)
	return err
}

// writeLines appends report or target lines (tab-separated, as printed)
// as table rows.
func writeLines(w io.Writer, lines []string) error {
	for _, l := range lines {
		cells := strings.Split(strings.TrimRight(l, "\t"), "\t")
		for len(cells) < 4 {
			cells = append(cells, "")
		}
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells[:4], " | ")); err != nil {
			return err
		}
	}
	return nil
}
