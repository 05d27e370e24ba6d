package archtest

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestDocLinks: every relative link in the project's Markdown points at a
// file, directory or heading that exists.
func TestDocLinks(t *testing.T) {
	broken, err := CheckLinks(filepath.Join("..")) // the repository root
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Error(b)
	}
}

// TestPlantedBrokenLinksAreFound is TestDocLinks' positive control: a
// missing file and a missing anchor are reported; links that resolve, URLs
// and links in code are not.
func TestPlantedBrokenLinksAreFound(t *testing.T) {
	got, err := CheckLinks(filepath.Join("testdata", "links"))
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, b := range got {
		targets = append(targets, b.Target)
	}
	if want := []string{"nowhere.md", "sub/page.md#not-there"}; !slices.Equal(targets, want) {
		t.Fatalf("broken links %v, want %v", got, want)
	}
}
