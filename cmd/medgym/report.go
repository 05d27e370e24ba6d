package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/medgym/medgym/cmd/medgym/internal/report"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// cmdReport writes the Markdown report and SVG charts of one stored run.
func cmdReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeURL := fs.String("store", "runs", "trajectory store: a directory or s3://bucket/prefix")
	s3Endpoint := fs.String("s3-endpoint", "", "S3 endpoint host:port (default $AWS_ENDPOINT_URL)")
	runID := fs.String("run", "", "run id (required)")
	out := fs.String("out", "", "output directory (default report-<run id>)")
	priceIn := fs.Float64("price-in", 0, "USD per 1M prompt tokens")
	priceOut := fs.Float64("price-out", 0, "USD per 1M completion tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runID == "" {
		return errors.New("report: --run is required (list runs with: medgym query --store DIR \"SELECT DISTINCT run_id FROM trajectories\")")
	}
	if *priceIn < 0 || *priceOut < 0 {
		return errors.New("report: --price-in and --price-out must not be negative")
	}
	if *out == "" {
		*out = "report-" + *runID
	}
	st, err := store.Open(ctx, *storeURL, store.Options{Endpoint: *s3Endpoint})
	if err != nil {
		return err
	}
	rows, err := st.ReadRun(ctx, *runID)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("report: store %s holds no episodes of run %s", st, *runID)
	}
	r := report.Build(*runID, rows, report.Options{PriceIn: *priceIn, PriceOut: *priceOut,
		Abstention: []string{tasks.EHRSQL2024Dataset}})
	paths, err := report.Write(*out, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "run %s: %d episodes, success %s; wrote %s and %d charts\n",
		*runID, r.Episodes, scoredRate(r.Correct, r.Scored, r.Episodes-r.Scored), paths[0], len(paths)-1)
	return nil
}
