package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// normalize reads the JSON-like value that starts with the '{' at
// text[start] and rewrites it as strict JSON. It returns the strict bytes,
// the index just past the value's closing brace, and how far it read (the
// end, or where it failed: the work it did).
//
// Leniencies, all confined to what strict JSON rejects (so strict JSON passes
// through unchanged):
//   - raw control characters inside strings are escaped;
//   - an invalid escape such as \d is read as a literal backslash;
//   - a """triple-quoted""" value outside strings becomes a JSON string; its
//     closing """ is the first one followed by ',', '}' or ']' (after
//     spaces), so docstrings inside the code survive;
//   - a comma right before '}' or ']' is dropped.
func normalize(text string, start int) (norm []byte, end, reach int, err error) {
	var (
		out   bytes.Buffer
		stack []byte
	)
	out.Grow(min(len(text)-start, 1<<16))
	for i := start; i < len(text); {
		c := text[i]
		switch c {
		case '"':
			if strings.HasPrefix(text[i:], `"""`) {
				content, next, err := tripleQuoted(text, i)
				if err != nil {
					return nil, 0, len(text), err // it looked to the end
				}
				b, err := json.Marshal(content)
				if err != nil {
					return nil, 0, next, fmt.Errorf("encode triple-quoted string: %w", err)
				}
				out.Write(b)
				i = next
				continue
			}
			next, err := quoted(&out, text, i)
			if err != nil {
				return nil, 0, len(text), err // it read to the end
			}
			i = next
			continue
		case '{':
			stack = append(stack, '}')
		case '[':
			stack = append(stack, ']')
		case '}', ']':
			if len(stack) == 0 || stack[len(stack)-1] != c {
				return nil, 0, i + 1, fmt.Errorf("unexpected %q at offset %d", c, i)
			}
			stack = stack[:len(stack)-1]
			dropTrailingComma(&out)
			out.WriteByte(c)
			if len(stack) == 0 {
				return out.Bytes(), i + 1, i + 1, nil
			}
			i++
			continue
		}
		out.WriteByte(c)
		i++
	}
	return nil, 0, len(text), errors.New("unterminated object (truncated output?)")
}

// quoted copies the JSON string starting at text[i] (a '"') to out, fixing
// control characters and invalid escapes, and returns the index past it.
func quoted(out *bytes.Buffer, text string, i int) (int, error) {
	out.WriteByte('"')
	for i++; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '"':
			out.WriteByte('"')
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(text) {
				return 0, errors.New("unterminated string (truncated output?)")
			}
			n := text[i+1]
			switch {
			case strings.IndexByte(`"\/bfnrt`, n) >= 0:
				out.WriteByte('\\')
				out.WriteByte(n)
				i++
			case n == 'u' && i+6 <= len(text) && isHex(text[i+2:i+6]):
				out.WriteString(text[i : i+6])
				i += 5
			default:
				out.WriteString(`\\`) // a literal backslash; n is read next
			}
		case c < 0x20:
			switch c {
			case '\n':
				out.WriteString(`\n`)
			case '\t':
				out.WriteString(`\t`)
			case '\r':
				out.WriteString(`\r`)
			default:
				fmt.Fprintf(out, `\u%04x`, c)
			}
		default:
			out.WriteByte(c)
		}
	}
	return 0, errors.New("unterminated string (truncated output?)")
}

// tripleQuoted returns the content of the """...""" value at text[i] and the
// index past its closing quotes.
func tripleQuoted(text string, i int) (string, int, error) {
	from := i + 3
	for k := from; ; {
		j := strings.Index(text[k:], `"""`)
		if j < 0 {
			return "", 0, errors.New(`unterminated """ string (truncated output?)`)
		}
		end := k + j
		rest := strings.TrimLeft(text[end+3:], " \t\r\n")
		if rest == "" || strings.IndexByte(",}]", rest[0]) >= 0 {
			return text[from:end], end + 3, nil
		}
		k = end + 1
	}
}

func dropTrailingComma(out *bytes.Buffer) {
	b := out.Bytes()
	k := len(b) - 1
	for k >= 0 && (b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r') {
		k--
	}
	if k >= 0 && b[k] == ',' {
		out.Truncate(k)
	}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
