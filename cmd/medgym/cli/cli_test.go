package cli

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// runCLI runs the medgym CLI in-process and returns its stdout, stderr and error.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	err := Run(ctx, args, &out, &errb)
	return out.String(), errb.String(), err
}
