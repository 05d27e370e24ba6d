// Package miniotest runs a real MinIO server for tests, as httptest runs an
// HTTP server: Start execs the MinIO binary built by scripts/setup.sh on a
// free loopback port with a temporary data directory, waits until it is
// ready and kills it when the test ends.
//
// The binary is looked up at $MEDGYM_TOOLS/minio (default
// $HOME/.cache/medgym/bin/minio). When it is missing the test is skipped,
// unless CI=true, where a missing binary fails the test.
package miniotest
