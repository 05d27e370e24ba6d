package generate

import (
	"math"
	"os"
	"testing"

	"github.com/medgym/medgym/tasks"
)

const python = "/usr/bin/python3"

// dataRoot finds the shared data (tasks.DataRoot); the test is skipped
// without it.
func dataRoot(t *testing.T) string {
	t.Helper()
	d := tasks.DataRoot()
	if _, err := os.Stat(d); err != nil {
		t.Skipf("no shared data at %s", d)
	}
	return d
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}
