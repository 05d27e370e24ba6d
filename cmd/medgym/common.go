package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// defaultDataRoot finds the shared data directory: $MEDGYM_DATA, else
// ../shared/data next to the repository holding the working directory.
func defaultDataRoot() string {
	if d := os.Getenv("MEDGYM_DATA"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return "../shared/data"
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return filepath.Join(d, "..", "shared", "data")
		}
		if filepath.Dir(d) == d {
			return "../shared/data"
		}
	}
}

// defaultLibraryDir is build/library in the repository holding the working
// directory ($MEDGYM_LIBRARY overrides).
func defaultLibraryDir() string {
	if d := os.Getenv("MEDGYM_LIBRARY"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return "build/library"
	}
	for d := dir; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return filepath.Join(d, "build", "library")
		}
	}
	return "build/library"
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
