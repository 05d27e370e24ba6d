package sandbox

import (
	"os"
	"strings"
	"testing"
)

// TestMaskedPaths: every line of masked_paths.txt is a clean pattern under
// /usr, and a masked path that exists on this host reads empty from inside
// a bwrap sandbox (cold and warm) while its neighbours still read. On a
// host with python3-sklearn that is the Wisconsin breast cancer data, the
// labels of every breast_cancer-* test row (a lookup scored 6/6 through
// it). systemtest's TestGoldRowsUnreachable is the search that decides
// what the list must hold.
func TestMaskedPaths(t *testing.T) {
	t.Parallel()
	pats, err := MaskedPatterns()
	if err != nil || len(pats) == 0 {
		t.Fatalf("masked_paths.txt: %v (%d patterns)", err, len(pats))
	}
	masks, err := hostMasks()
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for _, m := range masks {
		if !m.dir {
			file = m.path
			break
		}
	}
	if file == "" {
		t.Skip("no masked file on this host (python3-sklearn is not installed)")
	}
	host, err := os.ReadFile(file)
	if err != nil || len(host) == 0 {
		t.Fatalf("host %s: %d bytes, %v", file, len(host), err)
	}
	sibling := "/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv"
	for name, mk := range map[string]constructor{"cold": newWith(0), "warm": newWith(1)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := mk(t, Config{})
			ep := newEpisode()
			r := exec1(t, s, term(ep, "wc -c < "+file+"; head -c 40 "+sibling+" | wc -c", 30))
			if got := strings.Fields(r.Stdout); len(got) != 2 || got[0] != "0" {
				t.Fatalf("%s reads %q from inside the sandbox, want 0 bytes (%s %q)", file, r.Stdout, r.Status, r.Message)
			} else if _, err := os.Stat(sibling); err == nil && got[1] != "40" {
				t.Fatalf("the neighbour %s is hidden too: %q", sibling, r.Stdout)
			}
		})
	}
}
