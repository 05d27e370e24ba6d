package mimicfhir

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// readCSV streams the records of the gzip CSV file at path to fn, which
// gets a column lookup by lower-case header name ("" for an unknown
// column), and returns the file's hex SHA-256.
func readCSV(ctx context.Context, path string, fn func(get func(col string) string) error) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	zr, err := gzip.NewReader(bufio.NewReaderSize(io.TeeReader(f, h), 1<<20))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	r := csv.NewReader(zr)
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return "", fmt.Errorf("%s: header: %w", path, err)
	}
	idx := make(map[string]int, len(header))
	for i, c := range header {
		idx[strings.ToLower(strings.TrimSpace(c))] = i
	}
	var rec []string
	get := func(col string) string {
		i, ok := idx[col]
		if !ok || i >= len(rec) {
			return ""
		}
		return rec[i]
	}
	for n := 0; ; n++ {
		if n%8192 == 0 {
			if err := ctx.Err(); err != nil {
				return "", err
			}
		}
		rec, err = r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if err := fn(get); err != nil {
			return "", fmt.Errorf("%s line %d: %w", path, n+2, err)
		}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil { // hash the whole file
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
