#!/usr/bin/env bash
# lint: golangci-lint (pinned below; .golangci.yml says which linters and why) over every module of go.work.
# Installs it into MEDGYM_TOOLS (~/.cache/medgym/bin) the first time: a `go install` from the Go module proxy,
# about 3 minutes of building on 2 cores, then a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=v2.15.0
TOOLS=${MEDGYM_TOOLS:-$HOME/.cache/medgym/bin}
BIN=$TOOLS/golangci-lint-$VERSION
if [ ! -x "$BIN" ]; then
	mkdir -p "$TOOLS"
	tmp=$(mktemp -d)
	echo "lint: installing golangci-lint $VERSION (go install; a few minutes the first time)"
	GOBIN=$tmp go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$VERSION"
	mv "$tmp/golangci-lint" "$BIN"
	rmdir "$tmp"
fi
status=0
for dir in $(go list -m -f '{{.Dir}}'); do
	(cd "$dir" && "$BIN" run --config "$OLDPWD/.golangci.yml" ./...) || status=1
done
exit $status
