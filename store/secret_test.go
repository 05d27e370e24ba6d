package store

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCredentialsFromSecretFiles (issue 13 item 10): S3 credentials come
// from the environment or from secret files, never from flags.
func TestCredentialsFromSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{
		"AWS_ACCESS_KEY_ID_FILE":     write("id", "medgym"),
		"AWS_SECRET_ACCESS_KEY_FILE": write("secret", "from-a-file"),
	}
	o, err := Options{}.withEnv(func(k string) string { return env[k] })
	if err != nil || o.AccessKey != "medgym" || o.SecretKey != "from-a-file" {
		t.Fatalf("from files: %q %q %v", o.AccessKey, o.SecretKey, err)
	}
	env["AWS_SECRET_ACCESS_KEY"] = "from-env"
	if o, _ := (Options{}).withEnv(func(k string) string { return env[k] }); o.SecretKey != "from-env" {
		t.Errorf("the variable should win over its file: %q", o.SecretKey)
	}
	env["AWS_ACCESS_KEY_ID_FILE"] = filepath.Join(dir, "missing")
	if _, err := (Options{}).withEnv(func(k string) string { return env[k] }); err == nil {
		t.Error("a missing secret file is not an error")
	}
}
