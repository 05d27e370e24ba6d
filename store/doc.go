// Package store is medgym's trajectory store: scored episodes as Parquet
// rows (the schema of github.com/medgym/medgym/schemas/parquet), written to
// a local directory or to an S3 bucket (MinIO in tests and development) in a
// Hive layout that DuckDB, pyarrow and Spark read directly:
//
//	trajectories/run=<run_id>/dataset=<dataset>/part-<unique>.parquet
//	trajectories/run=<run_id>/_manifest.json
//
// A Write is durable when it returns (fsync + hard link for a directory, a
// completed PutObject for S3), so a caller may acknowledge the source
// messages afterwards. Files are created, never replaced (If-None-Match: *
// on S3, link(2) in a directory). Writes are idempotent per (run,
// episode): rows whose episode id is already stored are skipped, across
// files and across process restarts, because the store loads a run's
// stored episode ids from the files' episode_id column the first time it
// touches the run. Several processes writing one run (verifiers) share
// Claims (WithClaims): each episode's file is claimed before it is created,
// so no episode is stored twice wherever a writer stops (ADR 0024).
// Without claims, two processes writing the same run at the same moment
// can both store an episode; ReadRun deduplicates (the first file in key
// order wins).
//
// Batcher buffers rows and flushes them by count, size or age, reporting each
// row's fate through a callback, so a JetStream consumer acks a message only
// after its row is stored (and naks it when the flush fails).
//
// The package never links DuckDB; SQL over the store lives in store/query.
package store
