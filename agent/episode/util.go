package episode

import (
	"encoding/json"
	"strings"
)

// answerText renders an answer action's value as the text the verifier checks:
// a JSON string is unquoted; numbers, lists and booleans keep their JSON text.
func answerText(params []byte) string {
	var p struct {
		Answer json.RawMessage `json:"answer"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return ""
	}
	var s string
	if err := json.Unmarshal(p.Answer, &s); err == nil {
		return strings.TrimSpace(s)
	}
	return strings.TrimSpace(string(p.Answer))
}
