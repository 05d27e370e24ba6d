package online

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// State is what survives a restart: written after an iteration's last
// step, so a trainer killed mid-iteration redoes that iteration.
type State struct {
	// Iteration is the number of completed iterations (the next to run).
	Iteration int `json:"iteration"`
	// Version is the current policy version (0: the base model).
	Version     int       `json:"version"`
	Adapter     string    `json:"adapter,omitempty"`
	AdapterPath string    `json:"adapter_path,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func statePath(workDir string) string { return filepath.Join(workDir, "state.json") }

// LoadState reads the state file; a missing file is the zero state.
func LoadState(workDir string) (State, error) {
	b, err := os.ReadFile(statePath(workDir))
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("load state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("load state %s: %w", statePath(workDir), err)
	}
	return s, nil
}

// saveState writes the state atomically (temp file, fsync, rename).
func saveState(workDir string, s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	tmp := statePath(workDir) + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("save state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("save state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := os.Rename(tmp, statePath(workDir)); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}
