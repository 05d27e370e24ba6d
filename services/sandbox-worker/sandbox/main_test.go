package sandbox

import (
	"os"
	"testing"
)

// fakeSecret is in the environment of every test in this package, as a
// worker's credentials would be in its: agent code must never see it
// (TestAbuse's "host files and env").
const fakeSecret = "medgym-fake-secret-4242"

// TestMain puts fakeSecret in the environment. os.Setenv, not t.Setenv:
// the tests that check for it run in parallel.
func TestMain(m *testing.M) {
	if err := os.Setenv("AWS_SECRET_ACCESS_KEY", fakeSecret); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
