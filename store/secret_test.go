package store

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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

// TestS3PrivateCA (issue 13 item 10): an HTTPS S3 endpoint whose
// certificate a private CA signed is trusted with AWS_CA_BUNDLE (Options.CAFile)
// and refused without it.
func TestS3PrivateCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK) // HEAD bucket: it exists
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_CA_BUNDLE": ca}
	o, err := Options{Endpoint: srv.URL}.withEnv(func(k string) string { return env[k] })
	if err != nil || o.CAFile != ca {
		t.Fatalf("AWS_CA_BUNDLE not read: %q, %v", o.CAFile, err)
	}
	if _, err := newS3Backend(t.Context(), "s3://bucket/p", o); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	o.CAFile = ""
	if _, err := newS3Backend(t.Context(), "s3://bucket/p", o); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
}
