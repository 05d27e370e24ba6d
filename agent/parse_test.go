package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
)

var parseErrs = map[string]error{
	"ErrNoJSON":        ErrNoJSON,
	"ErrBadJSON":       ErrBadJSON,
	"ErrBadShape":      ErrBadShape,
	"ErrUnknownAction": ErrUnknownAction,
	"ErrBadParams":     ErrBadParams,
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		in         string
		wantName   string
		wantParams string
		wantErr    error
	}{
		{"plain", `{"action": "validate_code", "params": {"code": "print(1)"}}`, "validate_code", `{"code":"print(1)"}`, nil},
		{"keys sorted", `{"params": {"keyterm": "x", "info_type": "term", "data_path": "/data/a"}, "action": "request_info"}`,
			"request_info", `{"data_path":"/data/a","info_type":"term","keyterm":"x"}`, nil},
		{"debug", `{"action":"debug","params":{"code":"1/0","error_msg":"ZeroDivisionError"}}`, "debug", `{"code":"1/0","error_msg":"ZeroDivisionError"}`, nil},
		{"answer string", `{"action":"answer","params":{"answer":"03/14/2021"}}`, "answer", `{"answer":"03/14/2021"}`, nil},
		{"answer number kept verbatim", `{"action":"answer","params":{"answer": 25.2380}}`, "answer", `{"answer":25.2380}`, nil},
		{"answer bool", `{"action":"answer","params":{"answer":false}}`, "answer", `{"answer":false}`, nil},
		{"answer object keys sorted", `{"action":"answer","params":{"answer":{"b":1,"a":[2]}}}`, "answer", `{"answer":{"a":[2],"b":1}}`, nil},
		{"fence without language", "```\n{\"action\":\"terminal\",\"params\":{\"cmd\":\"ls\"}}\n```", "terminal", `{"cmd":"ls"}`, nil},
		{"closed think only", "<think>{}</think>", "", "", ErrNoJSON},
		{"braces in think do not leak", "<think>{\"action\":\"terminal\",\"params\":{\"cmd\":\"x\"}}</think>no action", "", "", ErrNoJSON},
		{"crlf and control chars", "{\"action\":\"terminal\",\"params\":{\"cmd\":\"echo a\r\nb\x01\"}}", "terminal", `{"cmd":"echo a\r\nb\u0001"}`, nil},
		{"unicode escape kept", `{"action":"terminal","params":{"cmd":"echo \u00e9"}}`, "terminal", `{"cmd":"echo é"}`, nil},
		{"bad unicode escape is literal", `{"action":"terminal","params":{"cmd":"echo \u00zz"}}`, "terminal", `{"cmd":"echo \\u00zz"}`, nil},
		{"null answer", `{"action":"answer","params":{"answer":null}}`, "", "", ErrBadParams},
		{"missing key", `{"action":"debug","params":{"code":"x"}}`, "", "", ErrBadParams},
		{"action not string", `{"action":1,"params":{}}`, "", "", ErrBadShape},
		{"params not object", `{"action":"terminal","params":"ls"}`, "", "", ErrBadShape},
		{"extra top-level key", `{"action":"terminal","params":{"cmd":"ls"},"thought":"hm"}`, "", "", ErrBadShape},
		{"array not object", `[{"action":"terminal"}]`, "", "", ErrBadShape},
		{"mismatched brackets", `{"action":"terminal","params":{"cmd":"ls"]}`, "", "", ErrBadJSON},
		{"unterminated triple quote", `{"action":"validate_code","params":{"code":"""print(1)}}`, "", "", ErrBadJSON},
		{"empty", "", "", "", ErrNoJSON},
		{"many braces", strings.Repeat("{", 5000), "", "", ErrBadJSON},
		{"valid after many junk objects", strings.Repeat("{x} ", 100) + `{"action":"terminal","params":{"cmd":"ls"}}`, "terminal", `{"cmd":"ls"}`, nil},
		{"unknown beats junk", `{x} {"action":"submit","params":{}} {y}`, "", "", ErrUnknownAction},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Parse() error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			if got.Name != tt.wantName || string(got.Params) != tt.wantParams {
				t.Fatalf("Parse() = %s %s, want %s %s", got.Name, got.Params, tt.wantName, tt.wantParams)
			}
		})
	}
}

// TestParseGivesUpAfterTooManyCandidates documents the search bound: after
// maxStarts candidate objects Parse stops looking.
func TestParseGivesUpAfterTooManyCandidates(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("{x} ", maxStarts+1) + `{"action":"terminal","params":{"cmd":"ls"}}`
	if _, err := Parse(in); !errors.Is(err, ErrBadJSON) {
		t.Fatalf("Parse() error = %v, want ErrBadJSON", err)
	}
}

// TestParseCorpus checks the real-world-style replies in testdata/corpus:
// every NAME.txt has a NAME.want holding either the expected action as
// canonical JSON or "error: ErrXxx".
func TestParseCorpus(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := readFile(t, f)
			want := strings.TrimSpace(readFile(t, strings.TrimSuffix(f, ".txt")+".want"))
			got, err := Parse(in)
			if e, ok := strings.CutPrefix(want, "error: "); ok {
				wantErr, known := parseErrs[e]
				if !known {
					t.Fatalf("unknown error %q in .want", e)
				}
				if !errors.Is(err, wantErr) {
					t.Fatalf("Parse() = %s %s, %v; want %s", got.Name, got.Params, err, e)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			var w schemas.Action
			if err := json.Unmarshal([]byte(want), &w); err != nil {
				t.Fatalf("bad .want: %v", err)
			}
			if got.Name != w.Name || string(got.Params) != string(w.Params) {
				t.Fatalf("Parse() =\n  %s %s\nwant\n  %s %s", got.Name, got.Params, w.Name, w.Params)
			}
		})
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzParse: Parse never panics, and a parsed action marshalled back to
// {"action":..,"params":..} parses to the same action.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*.txt"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`{"action":"answer","params":{"answer":[1e400,{"b":null,"a":"\u2028"}]}}`)
	f.Fuzz(func(t *testing.T, in string) {
		act, err := Parse(in)
		if err != nil {
			if act.Name != "" || act.Params != nil {
				t.Fatalf("error %v with non-zero action %+v", err, act)
			}
			return
		}
		if !json.Valid(act.Params) {
			t.Fatalf("params not valid JSON: %q", act.Params)
		}
		b, err := json.Marshal(act)
		if err != nil {
			t.Fatalf("marshal %+v: %v", act, err)
		}
		again, err := Parse(string(b))
		if err != nil {
			t.Fatalf("reparse %s: %v", b, err)
		}
		if again.Name != act.Name || string(again.Params) != string(act.Params) {
			t.Fatalf("round trip changed the action:\n  %s %s\n  %s %s", act.Name, act.Params, again.Name, again.Params)
		}
	})
}
