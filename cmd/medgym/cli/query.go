package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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
	lim := query.DefaultLimits()
	fs.StringVar(&lim.MemoryLimit, "memory-limit", lim.MemoryLimit, "DuckDB's memory limit for the query (nothing spills to disk)")
	fs.IntVar(&lim.Threads, "threads", lim.Threads, "DuckDB threads")
	fs.IntVar(&lim.MaxRows, "max-rows", lim.MaxRows, "refuse a result with more rows, after writing this many (0: no bound; a result is held in memory whole)")
	timeout := fs.Duration("timeout", 5*time.Minute, "stop the query after this long (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf(`usage: medgym query --store DIR "SELECT ... FROM trajectories ..."`)
	}
	if *format != "table" && *format != "csv" {
		return fmt.Errorf("query: --format %q (want table or csv)", *format)
	}
	if *timeout < 0 {
		return fmt.Errorf("query: --timeout %v (want 0 or more)", *timeout)
	}
	if err := lim.Validate(); err != nil {
		return err
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("--timeout %v reached", *timeout))
		defer cancel()
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
	// Rows go out as DuckDB produces them: the result is never held whole.
	w := query.NewTableWriter(stdout)
	if *format == "csv" {
		w = query.NewCSVWriter(stdout)
	}
	return query.Stream(ctx, dir, fs.Arg(0), lim, w)
}
