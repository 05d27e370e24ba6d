package verify

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Strict-mode parsers. Each one takes an already extracted answer (see
// lastLine) and returns a typed value or an error that says what was wrong
// with the text, for the verdict.

// lastLine returns the last non-empty line of s, trimmed, with one pair of
// matching surrounding quotes removed.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n\v\f")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return unquote(strings.TrimSpace(s))
}

// unquote removes one pair of matching surrounding quotes (' " or `) and the
// whitespace inside them.
func unquote(s string) string {
	if len(s) >= 2 {
		first, last := s[0], s[len(s)-1]
		if first == last && (first == '"' || first == '\'' || first == '`') {
			return strings.TrimSpace(s[1 : len(s)-1])
		}
	}
	return s
}

// scanNumber reads a plain decimal number at the start of s: an optional
// sign, digits with at most one decimal point (".5" and "5." are allowed),
// and an optional exponent. It returns the number's length, or 0 when s does
// not start with one. No thousands separators, no hex, no inf or nan.
func scanNumber(s string) int {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for i < len(s) && isDigit(s[i]) {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && isDigit(s[i]) {
			i++
			digits++
		}
	}
	if digits == 0 {
		return 0
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k > j {
			i = k
		}
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// errNotNumber is the cause of every number parse failure.
var errNotNumber = errors.New("not a number")

// parsePlainNumber parses s (trimmed) as exactly one plain number.
func parsePlainNumber(s string) (float64, error) {
	s = strings.TrimSpace(s)
	n := scanNumber(s)
	if n == 0 || n != len(s) {
		return 0, fmt.Errorf("%q: %w", s, errNotNumber)
	}
	return toFloat(s)
}

// parseNumber parses s as one number with optional trailing unit text:
//
//	"25.2", "-3", "2.5e-05", "25.2 kg/m^2", "90 mL/min/1.73 m²", "12%"
//
// The unit text must begin with a letter, %, ° or ‰, and none of its
// whitespace-separated words may itself be a number, so "5 or 6", "5 to 7",
// "3 4", "1,234", "4, 2", "4/5", "12:30" and "0x10" are all rejected.
func parseNumber(s string) (float64, error) {
	s = strings.TrimSpace(s)
	n := scanNumber(s)
	if n == 0 {
		return 0, fmt.Errorf("%q: %w", s, errNotNumber)
	}
	v, err := toFloat(s[:n])
	if err != nil {
		return 0, err
	}
	unit := strings.TrimSpace(s[n:])
	if unit == "" {
		return v, nil
	}
	if r, _ := utf8.DecodeRuneInString(unit); !unicode.IsLetter(r) && !strings.ContainsRune("%°‰", r) {
		return 0, fmt.Errorf("%q: %w (unexpected %q after the number)", s, errNotNumber, r)
	}
	if strings.TrimLeft(s[:n], "+-") == "0" && strings.IndexByte("xXoObB", s[n]) >= 0 {
		return 0, fmt.Errorf("%q: %w (hex, octal and binary literals are not accepted)", s, errNotNumber)
	}
	for w := range strings.FieldsSeq(unit) {
		if k := scanNumber(w); k > 0 && k == len(w) {
			return 0, fmt.Errorf("%q: %w (more than one number)", s, errNotNumber)
		}
	}
	return v, nil
}

// toFloat converts a scanned number; values out of float64 range are errors.
func toFloat(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q: %w (out of range)", s, errNotNumber)
	}
	return v, nil
}

// parseDate parses MM/DD/YYYY (one-digit month and day allowed) or ISO
// YYYY-MM-DD.
func parseDate(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{"1/2/2006", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: not a date (want MM/DD/YYYY or YYYY-MM-DD)", s)
}

// weeksDays is a gestational age.
type weeksDays struct{ weeks, days int }

// parseTuple parses a (weeks, days) pair. Accepted:
//
//	"(4, 2)", "[4, 2]", "4, 2", "4 weeks, 2 days", "(4 weeks, 2 days)",
//	"('4 weeks', '2 days')" (MedCalc-Bench's own form)
//
// Units are optional, but when given they must be week(s) then day(s).
// Both parts must be non-negative integers.
func parseTuple(s string) (weeksDays, error) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && ((s[0] == '(' && s[len(s)-1] == ')') || (s[0] == '[' && s[len(s)-1] == ']')) {
		s = s[1 : len(s)-1]
	}
	parts := strings.Split(s, ",")
	if len(parts) != 2 {
		return weeksDays{}, fmt.Errorf("%q: not a (weeks, days) pair", s)
	}
	w, err := tuplePart(parts[0], "week")
	if err != nil {
		return weeksDays{}, err
	}
	d, err := tuplePart(parts[1], "day")
	if err != nil {
		return weeksDays{}, err
	}
	return weeksDays{w, d}, nil
}

func tuplePart(p, unit string) (int, error) {
	p = unquote(strings.TrimSpace(p))
	num := p
	if i := strings.IndexFunc(p, unicode.IsLetter); i >= 0 {
		num = strings.TrimSpace(p[:i])
		if u := strings.ToLower(strings.TrimSpace(p[i:])); u != unit && u != unit+"s" {
			return 0, fmt.Errorf("%q: want a number of %ss", p, unit)
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a non-negative whole number of %ss", p, unit)
	}
	return n, nil
}

// parseBool accepts true/false, 1/0 and yes/no, case-insensitively.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q: not a boolean (want true/false, 1/0 or yes/no)", s)
}

// normString lower-cases s, trims it and collapses inner whitespace.
func normString(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// parseList splits an answer into its elements. Accepted, in this order:
//
//  1. a JSON or Python list/tuple literal: ["a", "b"], ['a', 'b'], (1, 2.5),
//     [(1,), (2,)] (sqlite fetchall: one-element rows are unwrapped; wider
//     rows become one "a, b" element), with None/null/True/False literals
//     and one-argument constructors (np.int64(3), Decimal('1.5')) unwrapped;
//  2. several non-empty lines: one element per line, unless the last line is
//     a list literal, which then wins (earlier lines are progress output);
//  3. one line: comma-separated elements ("a, b, c"), each trimmed and
//     unquoted; a line without a comma is a one-element list.
func parseList(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty list answer")
	}
	if isListLiteral(s) {
		return parseListLiteral(s)
	}
	lines := nonEmptyLines(s)
	if len(lines) > 1 {
		if last := lines[len(lines)-1]; isListLiteral(last) {
			return parseListLiteral(last)
		}
		out := make([]string, len(lines))
		for i, l := range lines {
			out[i] = unquote(l)
		}
		return out, nil
	}
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		out = append(out, unquote(strings.TrimSpace(p)))
	}
	return out, nil
}

func isListLiteral(s string) bool {
	return len(s) >= 2 && ((s[0] == '[' && s[len(s)-1] == ']') || (s[0] == '(' && s[len(s)-1] == ')'))
}

func nonEmptyLines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// literal is a parsed Python/JSON value: a scalar (text) or a sequence.
type literal struct {
	text  string
	items []literal
	seq   bool
}

// maxLiteralDepth bounds nesting so hostile output cannot blow the stack.
const maxLiteralDepth = 32

func parseListLiteral(s string) ([]string, error) {
	p := litParser{s: s}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("list literal: unexpected text at offset %d", p.i)
	}
	out := make([]string, len(v.items))
	for i, it := range v.items {
		out[i] = it.render()
	}
	return out, nil
}

// render turns an element into comparable text: one-element sequences are
// unwrapped, wider ones joined with ", ".
func (l literal) render() string {
	if !l.seq {
		return l.text
	}
	if len(l.items) == 1 {
		return l.items[0].render()
	}
	parts := make([]string, len(l.items))
	for i, it := range l.items {
		parts[i] = it.render()
	}
	return strings.Join(parts, ", ")
}

type litParser struct {
	s string
	i int
}

func (p *litParser) skipSpace() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *litParser) value(depth int) (literal, error) {
	if depth > maxLiteralDepth {
		return literal{}, errors.New("list literal: nested too deeply")
	}
	p.skipSpace()
	if p.i >= len(p.s) {
		return literal{}, errors.New("list literal: unexpected end")
	}
	switch c := p.s[p.i]; c {
	case '[', '(':
		return p.sequence(depth, map[byte]byte{'[': ']', '(': ')'}[c])
	case '"', '\'':
		t, err := p.str(c)
		return literal{text: t}, err
	}
	start := p.i
	for p.i < len(p.s) && strings.IndexByte(",()[] \t\r\n", p.s[p.i]) < 0 {
		p.i++
	}
	t := p.s[start:p.i]
	if t == "" {
		return literal{}, fmt.Errorf("list literal: empty element at offset %d", start)
	}
	if p.i < len(p.s) && p.s[p.i] == '(' {
		// A one-argument constructor such as np.float64(1.5), np.int64(3)
		// or Decimal('1.5') (numpy 2 and pandas print these) stands for its
		// argument.
		p.i++
		v, err := p.value(depth + 1)
		if err != nil {
			return literal{}, err
		}
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return literal{}, fmt.Errorf("list literal: %s(…) takes one argument", t)
		}
		p.i++
		return v, nil
	}
	switch t {
	case "null":
		t = "None"
	case "true":
		t = "True"
	case "false":
		t = "False"
	}
	return literal{text: t}, nil
}

func (p *litParser) sequence(depth int, closer byte) (literal, error) {
	p.i++ // opener
	l := literal{seq: true}
	for {
		p.skipSpace()
		if p.i < len(p.s) && p.s[p.i] == closer {
			p.i++
			return l, nil
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return literal{}, err
		}
		l.items = append(l.items, v)
		p.skipSpace()
		if p.i >= len(p.s) {
			return literal{}, errors.New("list literal: unterminated")
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case closer:
			p.i++
			return l, nil
		default:
			return literal{}, fmt.Errorf("list literal: unexpected %q at offset %d", p.s[p.i], p.i)
		}
	}
}

// str reads a quoted string with the common escapes (\\ \' \" \n \t \r \uXXXX);
// any other escaped character stands for itself.
func (p *litParser) str(q byte) (string, error) {
	p.i++ // quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), nil
		case c == '\\' && p.i+1 < len(p.s):
			p.i++
			switch e := p.s[p.i]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'u':
				if p.i+4 < len(p.s) {
					if r, err := strconv.ParseUint(p.s[p.i+1:p.i+5], 16, 32); err == nil {
						b.WriteRune(rune(r))
						p.i += 4
						break
					}
				}
				b.WriteByte(e)
			default:
				b.WriteByte(e)
			}
			p.i++
		default:
			_, size := utf8.DecodeRuneInString(p.s[p.i:])
			b.WriteString(p.s[p.i : p.i+size])
			p.i += size
		}
	}
	return "", errors.New("list literal: unterminated string")
}
