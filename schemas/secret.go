package schemas

import (
	"fmt"
	"os"
	"strings"
)

// Secret reads the credential named by the environment variable name: its
// value, or else the contents of the file named by name+"_FILE" (the
// Docker/Kubernetes secret-file convention, e.g. OPENAI_API_KEY_FILE=
// /run/secrets/openai), trailing newlines trimmed. Credentials come from
// these two places only: never from flags, specs or messages. An empty
// result with a nil error means neither is set.
func Secret(getenv func(string) string, name string) (string, error) {
	if name == "" {
		return "", nil
	}
	if v := getenv(name); v != "" {
		return v, nil
	}
	path := getenv(name + "_FILE")
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("secret %s_FILE: %w", name, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
