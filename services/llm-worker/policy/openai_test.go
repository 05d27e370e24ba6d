package policy

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
)

// TestRetriesZeroMeansNone: --llm-retries 0 used to mean 4 retries.
func TestRetriesZeroMeansNone(t *testing.T) {
	for _, tc := range []struct{ retries, want int }{{0, 1}, {2, 3}} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}))
		pool := &OpenAIPool{Defaults: ClientDefaults{DefaultBaseURL: srv.URL + "/v1", MaxRetries: tc.retries,
			MaxRetryWait: time.Millisecond, Getenv: func(string) string { return "" }}}
		pol, err := pool.Policy(schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = pol.Complete(context.Background(), schemas.EpisodeRequest{}, []schemas.ChatMessage{{Role: "user", Content: "hi"}})
		srv.Close()
		if err == nil {
			t.Fatalf("retries %d: a 503 endpoint answered", tc.retries)
		}
		if got := int(n.Load()); got != tc.want {
			t.Errorf("MaxRetries %d: %d requests, want %d", tc.retries, got, tc.want)
		}
	}
}

// TestCredentialsStayWithTheWorker: the spec carries the endpoint without
// userinfo; the worker's own --llm-url (with it) and an API key read from a
// secret file authenticate the request, and errors never show the password.
func TestCredentialsStayWithTheWorker(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		auth.Store(u + ":" + p + "|" + r.Header.Get("Authorization"))
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer srv.Close()
	withCreds := strings.Replace(srv.URL, "http://", "http://alice:pw-s3cr3t@", 1) + "/v1"
	pool := &OpenAIPool{Defaults: ClientDefaults{DefaultBaseURL: withCreds, MaxRetries: -1,
		Getenv: func(string) string { return "" }}}
	spec := schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "m", BaseURL: schemas.StripUserinfo(withCreds)}
	if err := spec.Validate(); err != nil {
		t.Fatalf("stripped spec: %v", err)
	}
	pol, err := pool.Policy(spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pol.Complete(context.Background(), schemas.EpisodeRequest{}, []schemas.ChatMessage{{Role: "user", Content: "hi"}})
	if err == nil || strings.Contains(err.Error(), "pw-s3cr3t") {
		t.Errorf("error %v: want one without the password", err)
	}
	if got, _ := auth.Load().(string); !strings.HasPrefix(got, "alice:pw-s3cr3t|") {
		t.Errorf("request auth %q: want the worker's basic auth", got)
	}

	keyFile := t.TempDir() + "/key"
	if err := os.WriteFile(keyFile, []byte("sk-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool2 := &OpenAIPool{Defaults: ClientDefaults{DefaultBaseURL: srv.URL + "/v1", MaxRetries: -1,
		Getenv: func(k string) string {
			if k == "MY_KEY_FILE" {
				return keyFile
			}
			return ""
		}}}
	pol, err = pool2.Policy(schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "m", APIKeyEnv: "MY_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = pol.Complete(context.Background(), schemas.EpisodeRequest{}, []schemas.ChatMessage{{Role: "user", Content: "hi"}})
	if got, _ := auth.Load().(string); got != ":|Bearer sk-file" {
		t.Errorf("request auth %q: want the key from MY_KEY_FILE", got)
	}
}

// TestPrivateCAEndpoint (issue 13 item 10): an https:// model endpoint
// whose certificate a private CA signed is reached with CAFile (--llm-ca)
// and refused without it.
func TestPrivateCAEndpoint(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ask := func(caFile string) error {
		pool := &OpenAIPool{Defaults: ClientDefaults{DefaultBaseURL: srv.URL + "/v1", CAFile: caFile, MaxRetries: -1,
			Getenv: func(string) string { return "" }}}
		pol, err := pool.Policy(schemas.PolicySpec{Name: schemas.PolicyOpenAI, Model: "m"})
		if err != nil {
			return err
		}
		_, err = pol.Complete(context.Background(), schemas.EpisodeRequest{}, []schemas.ChatMessage{{Role: "user", Content: "hi"}})
		return err
	}
	if err := ask(ca); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if err := ask(""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	if err := ask(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Error("a missing CA file is not an error")
	}
}
