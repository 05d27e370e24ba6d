package parquet_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
)

// TestValidateOutputFiles: the bound on text cells applies to each output
// file, not to files_json, whose JSON escapes what the agent's code wrote.
// A predictions file the sandbox returns (at most
// schemas.MaxOutputFileBytes) of '<' encodes to six times its size: the
// pipeline wrote that row, and the trainer refused it (and the whole run).
func TestValidateOutputFiles(t *testing.T) {
	t.Parallel()
	res, sc := sampleResult()
	res.Turns[0].Files = map[string]string{"predictions.csv": strings.Repeat("<", schemas.MaxOutputFileBytes)}
	r := parquet.FromEpisode(res, sc, "strict", sampleHashes)
	if len(r.Turns[0].FilesJSON) <= parquet.MaxTextBytes {
		t.Fatalf("files_json is %d bytes: the case needs more than %d", len(r.Turns[0].FilesJSON), parquet.MaxTextBytes)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("a row the pipeline writes: %v", err)
	}
	// An oversized file is still refused, and so is garbage.
	for _, c := range []struct{ files, col string }{
		{`{"big.csv":"` + strings.Repeat("x", parquet.MaxTextBytes+1) + `"}`, `turns[0].files_json["big.csv"]`},
		{`[` + strings.Repeat(`"x",`, parquet.MaxTextBytes/4) + `"x"]`, "turns[0].files_json"},
	} {
		r.Turns[0].FilesJSON = c.files
		var fe *parquet.FieldError
		if err := r.Validate(); !errors.As(err, &fe) || fe.Column != c.col {
			t.Errorf("files_json of %d bytes: %v, want a FieldError on %s", len(c.files), err, c.col)
		}
	}
}
