package testenv

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/medgym/medgym/tasks"
)

func post(t *testing.T, url string, v any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(v)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.String()
}

func TestFakeModelPatternAndAdapters(t *testing.T) {
	task := tasks.Task{Reference: "print(42)"}
	task.View.ID, task.View.Question, task.View.Context = "t1", "What is the score?", "A 70-year-old woman."
	m := NewFakeModel("base", []tasks.Task{task})
	srv := httptest.NewServer(m)
	defer srv.Close()
	goal := map[string]string{"role": "user", "content": "What is the score?\nA 70-year-old woman."}
	first := map[string]any{"model": "base", "messages": []any{goal}}
	second := map[string]any{"model": "base", "messages": []any{goal, map[string]string{"role": "assistant", "content": "x"}, map[string]string{"role": "user", "content": "err"}}}
	var got []string
	for _, req := range []any{first, first, second, second} {
		code, body := post(t, srv.URL+"/v1/chat/completions", req)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		got = append(got, body)
	}
	if !strings.Contains(got[0], "print(42)") || !strings.Contains(got[1], "1/0") ||
		!strings.Contains(got[2], "print(42)") || !strings.Contains(got[3], "-987654.321") {
		t.Fatalf("pattern: %q", got)
	}
	if code, _ := post(t, srv.URL+"/v1/chat/completions", map[string]any{"model": "a-v1", "messages": []any{goal}}); code != 404 {
		t.Fatalf("unknown adapter answered %d, want 404", code)
	}
	if code, body := post(t, srv.URL+"/v1/load_lora_adapter", map[string]string{"lora_name": "a-v1", "lora_path": "/x"}); code != 200 {
		t.Fatalf("load: %d %s", code, body)
	}
	if code, _ := post(t, srv.URL+"/v1/load_lora_adapter", map[string]string{"lora_name": "a-v1", "lora_path": "/x"}); code != 400 {
		t.Fatalf("second load answered %d, want 400 (vLLM: already loaded)", code)
	}
	if code, _ := post(t, srv.URL+"/v1/chat/completions", map[string]any{"model": "a-v1", "messages": []any{goal}}); code != 200 || m.Requests("a-v1") != 1 {
		t.Fatalf("adapter not served: %d", code)
	}
}
