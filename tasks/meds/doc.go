// Package meds reads event files in the Medical Event Data Standard (MEDS:
// subject_id, time, code, numeric value) stored as Parquet. It is a package
// of its own so that only the programs that generate the task library
// (cmd/medgym) link a Parquet reader, not every service that loads tasks.
package meds
