package verify

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestLastLine(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                       "",
		"\n\n  \n":               "",
		"42":                     "42",
		"step 1\n42\n\n":         "42",
		"step 1\r\n 'abc' \r\n":  "abc",
		"\"25.2\"":               "25.2",
		"`x`":                    "x",
		"'unbalanced\"":          "'unbalanced\"",
		"a\n  \" spaced \"  \n ": "spaced",
	} {
		if got := lastLine(in); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseNumber(t *testing.T) {
	t.Parallel()
	ok := map[string]float64{
		"25.2":                25.2,
		"-3":                  -3,
		"+3":                  3,
		".5":                  0.5,
		"5.":                  5,
		"2.5e-05":             2.5e-05,
		"1E3":                 1000,
		" 7 ":                 7,
		"25.2 kg/m^2":         25.2,
		"25.2kg":              25.2,
		"12%":                 12,
		"90 mL/min/1.73 m²":   90,
		"4 points":            4,
		"3e":                  3, // "e" is unit text
		"98.6 °F":             98.6,
		"10 rows":             10,
		"5 mg/dL (corrected)": 5,
		"0 points":            0,
		"0.5 ‰":               0.5,
	}
	for in, want := range ok {
		got, err := parseNumber(in)
		if err != nil || got != want {
			t.Errorf("parseNumber(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "abc", "answer: 5", "1,234", "4, 2", "5 or 6", "5 to 7", "3 4", "3-4", "3.4.5",
		"inf", "nan", "NaN", "0x10", "1e999", "-", ".", "e5", "5 - 6", "(5)",
		"4/5", "12:30", "5 (approx)", "5=5", "-0b1", "3×",
	} {
		if got, err := parseNumber(in); err == nil {
			t.Errorf("parseNumber(%q) = %v, want an error", in, got)
		}
	}
}

func TestParsePlainNumber(t *testing.T) {
	t.Parallel()
	if v, err := parsePlainNumber(" 1.5e2 "); err != nil || v != 150 {
		t.Errorf("parsePlainNumber(1.5e2) = %v, %v", v, err)
	}
	for _, in := range []string{"10 rows", "12%", "", "1_000"} {
		if _, err := parsePlainNumber(in); err == nil {
			t.Errorf("parsePlainNumber(%q): want an error", in)
		}
	}
}

func TestParseDate(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"03/14/2021", "3/14/2021", "2021-03-14", " 03/14/2021 "} {
		d, err := parseDate(in)
		if err != nil || d.Format("2006-01-02") != "2021-03-14" {
			t.Errorf("parseDate(%q) = %v, %v", in, d, err)
		}
	}
	for _, in := range []string{"14/03/2021", "2021/03/14", "March 14, 2021", "02/30/2021", "2021-3-14", ""} {
		if _, err := parseDate(in); err == nil {
			t.Errorf("parseDate(%q): want an error", in)
		}
	}
}

func TestParseTuple(t *testing.T) {
	t.Parallel()
	want := weeksDays{4, 2}
	for _, in := range []string{
		"(4, 2)", "[4, 2]", "4, 2", "4 weeks, 2 days", "(4 weeks, 2 days)", "('4 weeks', '2 days')",
		"4 week, 2 day", "(4,2)", " ( 4 , 2 ) ", "4 Weeks, 2 Days",
	} {
		got, err := parseTuple(in)
		if err != nil || got != want {
			t.Errorf("parseTuple(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "4", "(4, 2, 1)", "2 days, 4 weeks", "(4.5, 2)", "(-1, 2)", "4 weeks 2 days", "(4 months, 2 days)", "(a, b)",
	} {
		if got, err := parseTuple(in); err == nil {
			t.Errorf("parseTuple(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseBool(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{"true": true, "True": true, "YES": true, "1": true, "false": false, "FALSE": false, "no": false, " 0 ": false} {
		if got, err := parseBool(in); err != nil || got != want {
			t.Errorf("parseBool(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "2", "maybe", "truee", "t"} {
		if _, err := parseBool(in); err == nil {
			t.Errorf("parseBool(%q): want an error", in)
		}
	}
}

func TestNormString(t *testing.T) {
	t.Parallel()
	if got := normString("  Acute   Kidney\tInjury \n"); got != "acute kidney injury" {
		t.Errorf("normString = %q", got)
	}
}

func TestParseList(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		`["a", "b"]`:                     {"a", "b"},
		`['a', 'b']`:                     {"a", "b"},
		`(1, 2.5)`:                       {"1", "2.5"},
		`[(1,), (2,)]`:                   {"1", "2"},
		`[(1, 'x'), (2, 'y')]`:           {"1, x", "2, y"},
		`[None, True, null, false]`:      {"None", "True", "None", "False"},
		`["it\'s", "a\"b", "\u00e9"]`:    {"it's", `a"b`, "é"},
		`[]`:                             nil,
		"a\nb\n\nc\n":                    {"a", "b", "c"},
		"progress 50%\n['x', 'y']":       {"x", "y"},
		"a, b ,'c'":                      {"a", "b", "c"},
		"single":                         {"single"},
		"[[1], [2]]":                     {"1", "2"},
		`["a,b", "c"]`:                   {"a,b", "c"},
		"\"quoted\"\n'lines'":            {"quoted", "lines"},
		"[1, 2,]":                        {"1", "2"},
		"  [ 'spaced' , \"items\" ]  ":   {"spaced", "items"},
		"[np.int64(3), np.float64(1.5)]": {"3", "1.5"},
		"[Decimal('1.5'), np.str_('x')]": {"1.5", "x"},
		"[1, 2":                          {"[1", "2"}, // not a literal: comma-separated text
	} {
		got, err := parseList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseList(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", `["unterminated]`, "[1 2]", "[f(1, 2)]", "[f(]", "[,]", strings.Repeat("[", 100) + strings.Repeat("]", 100)} {
		if got, err := parseList(in); err == nil {
			t.Errorf("parseList(%q) = %q, want an error", in, got)
		}
	}
}

func TestPyFloat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{
		"7":          7,
		" 7\n":       7,
		"\n7\n\n":    7,
		"-7.5":       -7.5,
		"1_000.5":    1000.5,
		"1e3":        1000,
		".5":         0.5,
		"5.":         5,
		"+1E-2":      0.01,
		"inf":        math.Inf(1),
		"-Infinity":  math.Inf(-1),
		"1e400":      math.Inf(1),
		"\x1c3\x1f":  3,
		"\u00a03 ":   3,
		"1_0e1_0":    1e11,
		"0000.1000":  0.1,
		"  +.5e+1  ": 5,
	} {
		got, err := pyFloat(in)
		if err != nil || got != want {
			t.Errorf("pyFloat(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if v, err := pyFloat("NaN"); err != nil || !math.IsNaN(v) {
		t.Errorf("pyFloat(NaN) = %v, %v", v, err)
	}
	for _, in := range []string{"", "abc", "7 kg", "1__0", "_1", "1_", "1_.5", "0x10", "1,5", "--1", "+-1", "7\n8", "e5", ".", "1e", "infinit", "1.5.2"} {
		if v, err := pyFloat(in); err == nil {
			t.Errorf("pyFloat(%q) = %v, want an error", in, v)
		}
	}
}

func TestPyInt(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"64": "64", " 64\n": "64", "-3": "-3", "+3": "3", "1_000": "1000", "007": "7", "123456789012345678901234567890": "123456789012345678901234567890"} {
		got, err := pyInt(in)
		if err != nil || got.String() != want {
			t.Errorf("pyInt(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64.0", "6e1", "1__0", "_1", "abc", "--1", strings.Repeat("9", 4301)} {
		if v, err := pyInt(in); err == nil {
			t.Errorf("pyInt(%q) = %v, want an error", in, v)
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	if got := clip("short"); got != "short" {
		t.Errorf("clip(short) = %q", got)
	}
	long := strings.Repeat("é", maxAnswerBytes)
	got := clip(long)
	if len(got) > maxAnswerBytes || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("clip(long) has length %d and suffix %q", len(got), got[len(got)-8:])
	}
}
