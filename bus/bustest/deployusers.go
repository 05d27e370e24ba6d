package bustest

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

var passwordVar = regexp.MustCompile(`\$(MEDGYM_NATS_PASSWORD_[A-Z0-9_]+)`)

// DeployPasswordVars returns the environment variables, in file order, that
// the users of a deploy/nats auth file (auth.conf) read their passwords
// from, so that a test which starts nats-server on that file sets every one
// of them, including users added after the test was written.
func DeployPasswordVars(t testing.TB, authConf string) []string {
	t.Helper()
	b, err := os.ReadFile(authConf)
	if err != nil {
		t.Fatal(err)
	}
	var vars []string
	for _, m := range passwordVar.FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(vars, m[1]) {
			vars = append(vars, m[1])
		}
	}
	if len(vars) == 0 {
		t.Fatalf("%s names no $MEDGYM_NATS_PASSWORD_* variable", authConf)
	}
	return vars
}
