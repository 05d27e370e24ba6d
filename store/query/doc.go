// Package query runs SQL over a local copy of the trajectory store with
// DuckDB. The SQL sees a view named trajectories over every Parquet file
// under <dir>/trajectories (Hive partitioning on, so run and dataset are
// columns; union_by_name on, so files of different schema versions mix).
//
// Stream runs one read-only statement over a locked-down DuckDB
// connection; Confine, which `medgym query` calls first, makes the whole
// process unable to write files (Linux Landlock), so a statement the
// checks miss still cannot change the store.
//
// DuckDB cannot read s3:// here (its httpfs extension cannot be installed
// offline): copy an S3 store first with store.Store.CopyLocal. This package
// links DuckDB (cgo, ~70 MB); services must import only package store.
package query
