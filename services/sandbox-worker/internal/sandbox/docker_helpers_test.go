package sandbox

import "testing"

func newDocker(t testing.TB, cfg Config) *Sandbox {
	t.Helper()
	t.Skip("MEDGYM_DOCKER=1 but the docker backend is not built yet (see SANDBOX.md, Not done)")
	return nil
}
