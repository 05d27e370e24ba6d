// Package parquet is the one definition of medgym's trajectory Parquet
// schema: one row per episode, with the chat messages and the per-turn
// record (model text, parsed action, sandbox result, token ids and logprobs)
// as nested lists.
//
// Row is the Go form of a row; FromEpisode builds one from the verifier's
// inputs. NewRecord and RowsFromRecord convert between rows and Arrow record
// batches; Write and Read do the same for whole Parquet files (zstd, explicit
// row-group length, Arrow schema stored in the file). The schema is versioned
// by SchemaVersion and pinned by a golden test (testdata/schema.golden), so
// any change to it shows up in review. Additive changes (a new nullable
// column) keep readers working: Read fills missing columns with zero values,
// and DuckDB reads mixed files with union_by_name.
package parquet
