package service

import (
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/verifier/internal/verify"
	"github.com/medgym/medgym/tasks"
)

// The functions below expose the verifier's rules to the operator CLI
// (`medgym replay`), which cannot import internal/verify. Modes are strings
// here ("strict", "upstream"; "" is strict); an unknown mode is passed on,
// so the rules reject it the way the service would.

// ParseMode normalises a verifier mode: "" and "strict" give "strict",
// "upstream" gives "upstream"; anything else is an error.
func ParseMode(s string) (string, error) {
	m, err := verify.ParseMode(s)
	return string(m), err
}

// Version returns the rule-set version of mode, e.g. "1.0.0+strict.3f2a9c1d"
// (see verify.VersionFor).
func Version(mode string) string { return verify.VersionFor(toMode(mode)) }

// CheckOutput checks one code execution's output against the truth, as the
// verifier does for an observation that asks for a check.
func CheckOutput(mode string, dataset string, truth tasks.Truth, res schemas.ExecResult) schemas.Check {
	return verify.CheckOutput(toMode(mode), dataset, truth, res)
}

// Score scores a finished episode as the verifier configured with sc
// does: its outcome, its reward and a verdict for people.
func Score(mode string, sc Scoring, truth tasks.Truth, res schemas.EpisodeResult) (schemas.Outcome, float64, string) {
	return verify.Score(sc.options(toMode(mode)), truth, res)
}

func toMode(s string) verify.Mode {
	if m, err := verify.ParseMode(s); err == nil {
		return m
	}
	return verify.Mode(s)
}
