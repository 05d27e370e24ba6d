package verifier

import (
	"flag"
	"reflect"
	"strings"
	"testing"

	"github.com/medgym/medgym/services/verifier/verify"
)

// TestScoringReachesEveryOption: `medgym replay` once scored without
// GradedML because its Score built verify.Options itself and left a field
// out. Every field of Scoring, set, must show in the options it gives, and
// every option but the mode must come from Scoring.
func TestScoringReachesEveryOption(t *testing.T) {
	var sc Scoring
	v := reflect.ValueOf(&sc).Elem()
	for i := range v.NumField() {
		setNonZero(t, v.Field(i))
	}
	opt := sc.Options(verify.Strict)
	ov := reflect.ValueOf(opt)
	for i := range ov.NumField() {
		if ov.Field(i).IsZero() {
			t.Errorf("verify.Options.%s is not set from Scoring", ov.Type().Field(i).Name)
		}
	}
	// A positive control: an options value missing a field is caught.
	opt.GradedML = false
	if !reflect.ValueOf(opt).FieldByName("GradedML").IsZero() {
		t.Fatal("the check cannot see a missing field")
	}
}

// TestScoringFlags: the flags the verifier and `medgym replay` share set
// every Scoring field.
func TestScoringFlags(t *testing.T) {
	var sc Scoring
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	sc.RegisterFlags(fs)
	if err := fs.Parse([]string{"--format-reward", "0.1", "--graded-ml", "--wrong-answer-penalty", "2"}); err != nil {
		t.Fatal(err)
	}
	want := Scoring{FormatReward: 0.1, GradedML: true, WrongAnswerPenalty: 2}
	if sc != want {
		t.Errorf("flags gave %+v, want %+v", sc, want)
	}
	if err := (Scoring{WrongAnswerPenalty: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "wrong-answer penalty") {
		t.Errorf("penalty -1: %v, want a wrong-answer penalty error", err)
	}
}

// TestConfigFlags: the verifier's main and `medgym serve` fill Config from
// the same flags; --s3-insecure turns TLS off, its absence leaves it on.
func TestConfigFlags(t *testing.T) {
	parse := func(args ...string) Config {
		var c Config
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		c.RegisterFlags(fs, func(k string) string { return map[string]string{"MEDGYM_STORE": "s3://b/p"}[k] })
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse()
	if c.Store != "s3://b/p" || !c.StoreOptions.UseSSL || c.Concurrency != 32 {
		t.Errorf("defaults: %+v", c)
	}
	if c := parse("--s3-insecure", "--concurrency", "4", "--graded-ml"); c.StoreOptions.UseSSL || c.Concurrency != 4 || !c.Scoring.GradedML {
		t.Errorf("flags: %+v", c)
	}
	if err := (Config{Concurrency: -1}).Validate(); err == nil {
		t.Error("concurrency -1 accepted")
	}
}

func setNonZero(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Float64:
		v.SetFloat(0.5)
	default:
		t.Fatalf("Scoring field of kind %s: extend setNonZero", v.Kind())
	}
}
