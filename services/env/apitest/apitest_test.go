package apitest

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestCheckerCatchesMismatch is the checker's positive control: a body
// that breaks the document, an undocumented path answered without the
// error body, and a 500 are each a failure; a matching answer is not.
func TestCheckerCatchesMismatch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/tasks":
			_, _ = w.Write([]byte(`{"tasks": "not a list", "total": 1, "offset": 0}`))
		case "/healthz":
			_, _ = w.Write([]byte(`{"status": "ok"}`))
		case "/v1/sessions/x":
			w.WriteHeader(500)
			_, _ = w.Write([]byte(`{"error": {"code": "internal", "message": "boom"}}`))
		default:
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`not json`))
		}
	}))
	defer srv.Close()
	c, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: c}
	for _, p := range []string{"/healthz", "/v1/tasks", "/v1/sessions/x", "/elsewhere"} {
		resp, err := client.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if f := c.Failures(); len(f) != 3 {
		t.Fatalf("%d failures, want 3 (tasks, 500, undocumented path): %q", len(f), f)
	}
}
