package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/medgym/medgym/schemas"
)

// Parse errors. Parse wraps them with details; test with errors.Is.
var (
	// ErrNoJSON: the reply holds no JSON object at all.
	ErrNoJSON = errors.New("no JSON object found in the response")
	// ErrBadJSON: an object was found but it is not valid (even leniently
	// read) JSON, e.g. truncated output.
	ErrBadJSON = errors.New("invalid JSON")
	// ErrBadShape: valid JSON, but not {"action": <string>, "params": {...}}.
	ErrBadShape = errors.New("the JSON object must have exactly the keys \"action\" (a string) and \"params\" (an object)")
	// ErrUnknownAction: the action name is not one of the known actions.
	ErrUnknownAction = errors.New("unknown action")
	// ErrBadParams: the params of a known action have wrong keys or types.
	ErrBadParams = errors.New("invalid params")
	// ErrReplyTooLong: the reply is over MaxReplyBytes and is not parsed
	// (CapReply).
	ErrReplyTooLong = errors.New("the reply is too long")
)

// paramKeys lists, per action, the exact parameter keys. Every value must be
// a JSON string except answer's, which may be any non-null JSON value.
var paramKeys = map[string][]string{
	schemas.ActionRequestInfo:  {"data_path", "info_type", "keyterm"},
	schemas.ActionValidateCode: {"code"},
	schemas.ActionDebug:        {"code", "error_msg"},
	schemas.ActionTerminal:     {"cmd"},
	schemas.ActionAnswer:       {"answer"},
}

// maxStarts bounds how many '{' positions Parse tries, so adversarial input
// (thousands of unbalanced braces) stays linear-ish.
const maxStarts = 256

// Parse's work bound: all candidates together scan at most
// workPerByte·len(text) + minWork bytes (the text they read plus the strict
// JSON they decode), so a reply full of objects that never close (`{"a":`
// repeated) costs a few passes over it, not one pass per candidate. The
// first candidate always gets a whole pass.
const (
	workPerByte = 4
	minWork     = 64 << 10
)

// Parse extracts the first valid action object from a model reply. The
// returned Action's Params is canonical JSON: keys sorted, no insignificant
// whitespace, no HTML escaping, so equal actions have equal bytes.
//
// When no valid action is found the error wraps one of ErrNoJSON,
// ErrBadJSON, ErrBadShape, ErrUnknownAction or ErrBadParams, chosen from
// the most action-like object seen. Its work is linear in len(text) (see
// workPerByte); callers cap the reply first (CapReply).
func Parse(text string) (schemas.Action, error) {
	act, _, err := parse(text)
	return act, err
}

// parse is Parse, also returning the work done (bytes scanned and decoded).
func parse(text string) (schemas.Action, int, error) {
	text = stripThink(text)
	if strings.TrimSpace(text) == "" {
		return schemas.Action{}, 0, fmt.Errorf("%w (empty after removing reasoning)", ErrNoJSON)
	}
	var (
		best     error // error of the most action-like candidate
		bestRank int
		starts   int
		budget   = workPerByte*len(text) + minWork
		work     int
	)
	note := func(rank int, err error) {
		if rank > bestRank {
			best, bestRank = err, rank
		}
	}
	for i := 0; i < len(text); {
		j := strings.IndexByte(text[i:], '{')
		if j < 0 {
			break
		}
		start := i + j
		starts++
		if starts > maxStarts {
			note(1, fmt.Errorf("%w: too many '{' without a valid action", ErrBadJSON))
			break
		}
		// The candidate reads at most what is left of the budget: a
		// window that ends early makes it unterminated, and the search
		// stops.
		window := text[:min(len(text), start+max(budget-work, 0))]
		norm, end, reach, err := normalize(window, start)
		work += reach - start + len(norm)
		if err != nil {
			if len(window) < len(text) && reach >= len(window) {
				note(1, fmt.Errorf("%w: gave up after reading %d bytes of a %d-byte reply without a valid action", ErrBadJSON, work, len(text)))
				break
			}
			note(1, fmt.Errorf("%w: %v", ErrBadJSON, err))
			i = start + 1
			continue
		}
		act, rank, err := decodeAction(norm)
		if err == nil {
			return act, work, nil
		}
		note(rank, err)
		if rank >= 2 {
			// A syntactically valid object: its insides are data (strings,
			// nested params), not further candidates.
			i = end
		} else {
			i = start + 1
		}
	}
	if best == nil {
		return schemas.Action{}, work, ErrNoJSON
	}
	return schemas.Action{}, work, best
}

// stripThink drops reasoning: everything up to the last </think>, or the
// whole reply when it opens a <think> block that never closes (truncated).
func stripThink(text string) string {
	if k := strings.LastIndex(text, "</think>"); k >= 0 {
		return text[k+len("</think>"):]
	}
	if strings.HasPrefix(strings.TrimSpace(text), "<think>") {
		return ""
	}
	return text
}

// decodeAction validates strict JSON as an action. rank says how far it
// got: 1 invalid JSON, 2 valid JSON but wrong shape, 3 known shape with a
// bad action or params.
func decodeAction(norm []byte) (schemas.Action, int, error) {
	dec := json.NewDecoder(bytes.NewReader(norm))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return schemas.Action{}, 1, fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return schemas.Action{}, 2, ErrBadShape
	}
	name, okName := obj["action"].(string)
	params, okParams := obj["params"].(map[string]any)
	if len(obj) != 2 || !okName || !okParams {
		if _, has := obj["action"]; has {
			return schemas.Action{}, 3, fmt.Errorf("%w (got keys %s)", ErrBadShape, keyList(obj))
		}
		return schemas.Action{}, 2, fmt.Errorf("%w (got keys %s)", ErrBadShape, keyList(obj))
	}
	want, known := paramKeys[name]
	if !known {
		return schemas.Action{}, 3, fmt.Errorf("%w %q (want one of %s)", ErrUnknownAction, name, strings.Join(sortedActions(), ", "))
	}
	if err := checkParams(name, want, params); err != nil {
		return schemas.Action{}, 3, err
	}
	raw, err := canonical(params)
	if err != nil {
		return schemas.Action{}, 3, fmt.Errorf("%w: %v", ErrBadParams, err)
	}
	return schemas.Action{Name: name, Params: raw}, 0, nil
}

func checkParams(name string, want []string, params map[string]any) error {
	match := len(params) == len(want)
	for _, k := range want {
		if _, ok := params[k]; !ok {
			match = false
		}
	}
	if !match {
		return fmt.Errorf("%w for %s: want keys %s, got %s", ErrBadParams, name, strings.Join(want, ", "), keyList(params))
	}
	for _, k := range want {
		v := params[k]
		if name == schemas.ActionAnswer {
			if v == nil {
				return fmt.Errorf("%w for %s: %q must not be null", ErrBadParams, name, k)
			}
			continue
		}
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%w for %s: %q must be a string", ErrBadParams, name, k)
		}
	}
	return nil
}

// canonical marshals v with sorted keys and without HTML escaping.
func canonical(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

func keyList(m map[string]any) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	if len(ks) == 0 {
		return "none"
	}
	return strings.Join(ks, ", ")
}

func sortedActions() []string {
	ks := make([]string, 0, len(paramKeys))
	for k := range paramKeys {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
