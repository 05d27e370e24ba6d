package reqinfo

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "patients.csv"), []byte("subject_id,gender,diagnosis\n1,M,sepsis\n2,F,pneumonia\n3,F,sepsis\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "labs.csv.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	var b strings.Builder
	b.WriteString("subject_id,label,value\n")
	for i := range 30 {
		b.WriteString("1,glucose," + string(rune('a'+i%26)) + "x\n")
	}
	b.WriteString("2,pneumonia screen,1\n")
	if _, err := zw.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestAnswer(t *testing.T) {
	dir := writeFixture(t)
	x := NewIndex()
	tests := []struct {
		name, path, info, key string
		want                  []string
		wantErr               bool
	}{
		{"names", "patients.csv", ColumnNames, "", []string{"The column names are: ['subject_id', 'gender', 'diagnosis']"}, false},
		{"names gz", "labs.csv.gz", ColumnNames, "", []string{"['subject_id', 'label', 'value']"}, false},
		{"values", "patients.csv", ColumnValues, "gender", []string{"The column values include: ['M', 'F']"}, false},
		{"values numbers", "patients.csv", ColumnValues, "subject_id", []string{"[1, 2, 3]"}, false},
		{"too many", "labs.csv.gz", ColumnValues, "value", []string{"Too many values in the column"}, false},
		{"unknown column", "patients.csv", ColumnValues, "nope", nil, true},
		{"term exact", "patients.csv", Term, "sepsis", []string{`"patients.csv":"The table contains the keyterm \"sepsis\" under the following columns ['diagnosis'].`, `"labs.csv.gz":"The table does not contain the keyterm sepsis.`}, false},
		{"term fuzzy", ".", Term, "pneumonai", []string{`The closest values are: ['pneumonia']`}, false},
		{"term empty", ".", Term, " ", nil, true},
		{"bad type", "patients.csv", "rows", "", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := x.Answer(filepath.Join(dir, tc.path), tc.info, tc.key)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("answer %q lacks %q", got, w)
				}
			}
		})
	}
}

func TestIndexBuiltOnce(t *testing.T) {
	dir := writeFixture(t)
	x := NewIndex()
	d1, err := x.Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "patients.csv")); err != nil {
		t.Fatal(err)
	}
	d2, err := x.Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || len(d2.Tables) != 2 {
		t.Fatalf("index rebuilt or incomplete: %d tables", len(d2.Tables))
	}
}

func TestLevenshtein(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"kitten", "sitting", 3}, {"", "abc", 3}, {"abc", "abc", 0}, {"flaw", "lawn", 2}} {
		if got := levenshtein([]rune(c.a), []rune(c.b)); got != c.d {
			t.Errorf("levenshtein(%q,%q)=%d want %d", c.a, c.b, got, c.d)
		}
	}
}
