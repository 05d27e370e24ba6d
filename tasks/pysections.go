package tasks

import (
	"errors"
	"fmt"
	"strings"
)

// pySections is a Python source cut into named sections. A section starts
// at a "# @section NAME" line; an optional "# @uses A B" line right after it
// names the sections it needs.
type pySections struct {
	order []string
	body  map[string]string
	uses  map[string][]string
}

func parsePySections(src string) (pySections, error) {
	s := pySections{body: map[string]string{}, uses: map[string][]string{}}
	cur := ""
	var b strings.Builder
	flush := func() {
		if cur != "" {
			s.body[cur] = strings.TrimRight(b.String(), "\n") + "\n"
		}
		b.Reset()
	}
	for i, line := range strings.Split(src, "\n") {
		switch {
		case strings.HasPrefix(line, "# @section "):
			flush()
			cur = strings.TrimSpace(strings.TrimPrefix(line, "# @section "))
			if _, dup := s.body[cur]; dup {
				return pySections{}, fmt.Errorf("line %d: duplicate section %q", i+1, cur)
			}
			s.order = append(s.order, cur)
			s.body[cur] = ""
		case strings.HasPrefix(line, "# @uses "):
			if cur == "" {
				return pySections{}, fmt.Errorf("line %d: @uses outside a section", i+1)
			}
			s.uses[cur] = strings.Fields(strings.TrimPrefix(line, "# @uses "))
		case cur != "":
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	flush()
	if len(s.order) == 0 {
		return pySections{}, errors.New("no sections")
	}
	return s, nil
}

// program returns the sections name needs (itself last), in file order.
func (s pySections) program(name string) (string, error) {
	need := map[string]bool{}
	var visit func(n string, depth int) error
	visit = func(n string, depth int) error {
		if _, ok := s.body[n]; !ok {
			return fmt.Errorf("unknown section %q", n)
		}
		if depth > len(s.order) {
			return fmt.Errorf("section %q: dependency cycle", n)
		}
		if need[n] {
			return nil
		}
		need[n] = true
		for _, u := range s.uses[n] {
			if err := visit(u, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(name, 0); err != nil {
		return "", err
	}
	parts := make([]string, 0, len(need))
	for _, n := range s.order {
		if need[n] {
			parts = append(parts, s.body[n])
		}
	}
	return strings.Join(parts, "\n\n"), nil
}
