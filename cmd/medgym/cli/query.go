package cli

import (
	"context"
	"errors"
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
// As a process of its own (Standalone) it confines itself to reading
// before the statement runs (query.Confine).
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
	if Standalone {
		if err := confineQuery(dir, *storeURL, stderr); err != nil {
			return err
		}
	}
	// Rows go out as DuckDB produces them: the result is never held whole.
	w := query.NewTableWriter(stdout)
	if *format == "csv" {
		w = query.NewCSVWriter(stdout)
	}
	return query.Stream(ctx, dir, fs.Arg(0), lim, w)
}

// Standalone says that Run is the whole process (the medgym binary), so a
// command may restrict the process itself: medgym query confines it to
// reading files. Tests that call Run in-process leave it false.
var Standalone bool

// confineQuery confines this process to reading files before the query
// runs: a statement the checks miss cannot write the store, nor anything
// else but dir when it is a temporary copy of an S3 store (removed after
// the query). A kernel without Landlock leaves the process as it is, and
// says so.
func confineQuery(dir, storeURL string, stderr io.Writer) error {
	var scratch []string
	if dir != storeURL {
		scratch = append(scratch, dir)
	}
	err := query.Confine(scratch...)
	if errors.Is(err, query.ErrNoLandlock) {
		NewLogger(stderr, "warn").Warn("query: the kernel cannot confine this process to reading (no Landlock); the statement check and DuckDB's settings still hold", "err", err)
		return nil
	}
	return err
}
