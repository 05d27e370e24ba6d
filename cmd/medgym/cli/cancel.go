package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
)

// cmdCancel stops a run: the dispatcher publishes nothing more of it and
// either lets its episodes in flight finish (the default) or withdraws the
// requests no worker took and finishes the run at once (--drop). Once the
// dispatcher has finished it, the run is marked cancelled in the store's
// manifest.
func cmdCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", "", "NATS URL of the running services (default: the embedded server's --state)")
	state := fs.String("state", ".medgym", "directory of the embedded JetStream file store (without --nats)")
	drop := fs.Bool("drop", false, "drop the episodes in flight instead of letting them finish")
	wait := fs.Duration("wait", 30*time.Minute, "how long to wait for the dispatcher to finish the run (0: do not wait, nor write the manifest)")
	storeURL := fs.String("store", "runs", "trajectory store whose manifest records the cancellation: a directory or s3://bucket/prefix")
	s3Endpoint := fs.String("s3-endpoint", "", "S3 endpoint host:port (default $AWS_ENDPOINT_URL)")
	s3Region := fs.String("s3-region", "", "S3 region (default $AWS_REGION)")
	s3Insecure := fs.Bool("s3-insecure", false, "use plain HTTP for the S3 endpoint")
	logLevel := fs.String("log", "warn", "log level: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: medgym cancel [flags] RUN")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("cancel: name one run id")
	}
	runID := fs.Arg(0)
	if !schemas.ValidToken(runID) {
		return fmt.Errorf("cancel: %q is not a run id (letters, digits, - and _)", runID)
	}
	mode := schemas.CancelDrain
	if *drop {
		mode = schemas.CancelDrop
	}
	log := NewLogger(stderr, *logLevel)
	url := *natsURL
	var opts []bus.ConnectOption
	if url == "" {
		// No services run on the embedded server now (the lock says so),
		// so nothing is in flight: the run is finished here.
		unlock, err := lockState(*state, "cancel")
		if err != nil {
			return err
		}
		defer unlock()
		inProcess, stop, err := startEmbedded(*state)
		if err != nil {
			return err
		}
		defer stop()
		url, opts = bus.InProcessURL, append(opts, inProcess)
	}
	conn, err := bus.Connect(ctx, url, "medgym-cancel", log, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		return err
	}
	kv, err := bus.OpenBucket[schemas.RunStatus](ctx, conn, schemas.BucketRuns)
	if err != nil {
		return err
	}
	st, err := requestCancel(ctx, kv, runID, mode, *natsURL == "")
	if err != nil {
		return err
	}
	if *natsURL == "" && mode == schemas.CancelDrop {
		if err := purgeRequests(ctx, conn, runID); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "run %s: cancel (%s) requested at %d/%d episodes done, %d published\n", runID, mode, st.Done, st.Total, st.Published)
	if *wait == 0 {
		return nil
	}
	st, err = waitFinished(ctx, kv, runID, *wait)
	if err != nil {
		return err
	}
	stor, err := store.Open(ctx, *storeURL, store.Options{Endpoint: *s3Endpoint, Region: *s3Region, UseSSL: !*s3Insecure})
	if err != nil {
		return err
	}
	rows, err := stor.ReadRun(ctx, runID)
	if err != nil {
		return err
	}
	if err := writeCancelledManifest(ctx, stor, st, rows); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "run %s cancelled (%s): %d of %d episodes stored, %d published; manifest in %s\n",
		runID, st.Cancel, len(rows), st.Total, st.Published, stor)
	return nil
}

// requestCancel records the cancel request in the run's status. finish
// also finishes the run (no dispatcher runs to do it).
func requestCancel(ctx context.Context, kv *bus.Bucket[schemas.RunStatus], runID, mode string, finish bool) (schemas.RunStatus, error) {
	for {
		st, rev, err := kv.Get(ctx, runID)
		if errors.Is(err, bus.ErrNotFound) {
			return schemas.RunStatus{}, fmt.Errorf("cancel: no run %s", runID)
		}
		if err != nil {
			return schemas.RunStatus{}, fmt.Errorf("cancel %s: %w", runID, err)
		}
		switch {
		case st.Error != "":
			return st, fmt.Errorf("cancel: run %s was refused by the dispatcher: %s", runID, st.Error)
		case st.Finished && !st.Cancelled:
			return st, fmt.Errorf("cancel: run %s already finished (%d episodes)", runID, st.Done)
		case st.Cancelled, st.Cancel == mode || st.Cancel == schemas.CancelDrop:
			return st, nil // already asked (dropping is the stronger request)
		}
		st.Cancel = mode
		if finish {
			st.Finished, st.Cancelled = true, true
		}
		st.UpdatedAt = time.Now().UTC()
		if _, err := kv.Update(ctx, runID, st, rev); errors.Is(err, bus.ErrConflict) {
			continue // the dispatcher updated it meanwhile
		} else if err != nil {
			return st, fmt.Errorf("cancel %s: %w", runID, err)
		}
		return st, nil
	}
}

func purgeRequests(ctx context.Context, conn *bus.Conn, runID string) error {
	if err := conn.Purge(ctx, schemas.StreamEpisodes, schemas.EpisodeRequested.For(runID)); err != nil {
		return fmt.Errorf("cancel %s: withdraw requests: %w", runID, err)
	}
	return nil
}

// waitFinished polls the run's status until the dispatcher finishes it,
// riding out failed reads (NATS restarting), for at most d.
func waitFinished(ctx context.Context, kv *bus.Bucket[schemas.RunStatus], runID string, d time.Duration) (schemas.RunStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var st schemas.RunStatus
	for {
		if cur, _, err := kv.Get(ctx, runID); err == nil {
			if st = cur; st.Finished {
				return st, nil
			}
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("run %s: the dispatcher did not finish the cancelled run within %s (%d/%d episodes done, %d published; is a dispatcher running?)",
				runID, d, st.Done, st.Total, st.Published)
		case <-tick.C:
		}
	}
}

// writeCancelledManifest writes the manifest of a cancelled run: what is
// stored, and how many episodes the run had planned.
func writeCancelledManifest(ctx context.Context, st *store.Store, status schemas.RunStatus, rows []parquet.Row) error {
	m, err := store.NewManifest(status.Spec.RunID, rows, status.Spec)
	if err != nil {
		return err
	}
	m.Cancelled, m.Planned = true, status.Total
	if err := st.WriteManifest(ctx, status.Spec.RunID, m); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}
