package verify

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
)

// Mode selects the rule set.
type Mode string

// Modes.
const (
	// Strict is medgym's default: stdout only, clean exits only, typed
	// comparison against the truth.
	Strict Mode = "strict"
	// Upstream reproduces MedAgentGym's per-dataset validate(), bugs
	// included, to compare with the paper's numbers.
	Upstream Mode = "upstream"
)

// RulesSemver is the semantic version of the rule sets. Bump the major when
// a rule change can flip an accepted answer to rejected or back. 1.2.0: the
// termination closed (scored turn_limit, nothing graded), and an output
// task that ends on the answer action or the turn limit is scored on its
// last code run (no check of an answer changed). 2.0.0: a truth's Decimals
// (ehrsql2024: numbers compared rounded to 3 decimals, as the benchmark's
// scorer compares them) replaces its relative tolerance.
const RulesSemver = "2.0.0"

// ParseMode parses a verifier mode; "" means Strict.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "", Strict:
		return Strict, nil
	case Upstream:
		return Upstream, nil
	}
	return "", fmt.Errorf("parse verifier mode %q: want %q or %q", s, Strict, Upstream)
}

// ruleSource is the source of every file whose code decides a verdict. The
// version hash covers it, so any change to the rules (even a comment) gives
// rows a new version and they are never mixed silently with older ones.
//
//go:embed check.go parse.go predictions.go score.go strict.go upstream.go
var ruleSource embed.FS

// ruleFiles lists the files each mode's hash covers.
var ruleFiles = map[Mode][]string{
	Strict:   {"check.go", "parse.go", "predictions.go", "score.go", "strict.go"},
	Upstream: {"check.go", "parse.go", "predictions.go", "score.go", "strict.go", "upstream.go"},
}

var versions = sync.OnceValue(func() map[Mode]string {
	out := make(map[Mode]string, len(ruleFiles))
	for m, files := range ruleFiles {
		h := sha256.New()
		h.Write([]byte(m))
		for _, f := range files {
			b, err := ruleSource.ReadFile(f)
			if err != nil {
				// Unreachable: go:embed guarantees the files at build time.
				b = []byte("missing " + f)
			}
			h.Write([]byte{0})
			h.Write([]byte(f))
			h.Write([]byte{0})
			// CRLF checkouts must hash like LF ones.
			h.Write([]byte(strings.ReplaceAll(string(b), "\r\n", "\n")))
		}
		out[m] = RulesSemver + "+" + string(m) + "." + hex.EncodeToString(h.Sum(nil))[:8]
	}
	return out
})

// VersionFor returns the rule-set version of mode, e.g.
// "1.0.0+strict.3f2a9c1d": the semver, the mode and the first 8 hex digits
// of a SHA-256 over the mode's rule source. "" is Strict; an unknown mode
// gives RulesSemver + "+invalid".
func VersionFor(mode Mode) string {
	if mode == "" {
		mode = Strict
	}
	if v, ok := versions()[mode]; ok {
		return v
	}
	return RulesSemver + "+invalid"
}
