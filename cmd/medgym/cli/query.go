package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/query"
)

// cmdQuery runs SQL over a store's Parquet with DuckDB. The view
// `trajectories` covers every run (Hive columns run and dataset included).
func cmdQuery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeURL := fs.String("store", "runs", "trajectory store: a directory or s3://bucket/prefix")
	format := fs.String("format", "table", "table or csv")
	endpoint := fs.String("s3-endpoint", "", "S3 endpoint (default $AWS_ENDPOINT_URL)")
	insecure := fs.Bool("s3-insecure", false, "plain HTTP to S3")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf(`usage: medgym query --store DIR "SELECT ... FROM trajectories ..."`)
	}
	st, err := store.Open(ctx, *storeURL, store.Options{Endpoint: *endpoint, UseSSL: !*insecure})
	if err != nil {
		return err
	}
	dir := *storeURL
	if strings.HasPrefix(dir, "s3://") {
		tmp, err := os.MkdirTemp("", "medgym-query-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := st.CopyLocal(ctx, "", tmp); err != nil {
			return fmt.Errorf("copy %s locally for DuckDB: %w", st, err)
		}
		dir = tmp
	}
	cols, rows, err := query.Query(ctx, dir, fs.Arg(0))
	if err != nil {
		return err
	}
	if *format == "csv" {
		return query.WriteCSV(stdout, cols, rows)
	}
	return query.WriteTable(stdout, cols, rows)
}
