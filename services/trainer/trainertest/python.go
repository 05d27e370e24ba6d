package trainertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/medgym/medgym/tasks"
)

// Python returns the interpreter the trainer's Python tests use: $MEDGYM_PYTHON,
// else the project venv (<repo>/.venv/bin/python, made by scripts/venv.sh),
// else /usr/bin/python3. It must import the given modules (torch at least);
// otherwise the test fails under CI=true and is skipped elsewhere.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	py := os.Getenv("MEDGYM_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
		if root := tasks.RepoRoot(); root != "" {
			if v := filepath.Join(root, ".venv", "bin", "python"); isExec(v) {
				py = v
			}
		}
	}
	imports := "import torch"
	for _, m := range modules {
		imports += ", " + m
	}
	if out, err := exec.Command(py, "-c", imports).CombinedOutput(); err != nil {
		msg := py + " cannot " + imports + " (make venv, or scripts/venv.sh, installs them into .venv): " + string(out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&0o111 != 0
}
