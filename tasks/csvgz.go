package tasks

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

// ReadCSVGz streams the records of the gzip CSV file at path to fn, which
// gets a column lookup by lower-case header name ("" for an unknown
// column), and returns the file's hex SHA-256 (of the compressed bytes, as
// PhysioNet's SHA256SUMS.txt lists them). The generators read the demo
// tables through it.
func ReadCSVGz(ctx context.Context, path string, fn func(get func(col string) string) error) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	zr, err := gzip.NewReader(bufio.NewReaderSize(io.TeeReader(f, h), 1<<20))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	r := csv.NewReader(zr)
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return "", fmt.Errorf("read %s: header: %w", path, err)
	}
	idx := make(map[string]int, len(header))
	for i, c := range header {
		idx[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(c, "\ufeff")))] = i
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
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return "", err
			}
		}
		rec, err = r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		if err := fn(get); err != nil {
			line, _ := r.FieldPos(0)
			return "", fmt.Errorf("read %s:%d: %w", path, line, err)
		}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil { // the rest of the file, for the hash
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
