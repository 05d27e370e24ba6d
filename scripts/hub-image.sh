#!/usr/bin/env bash
# hub-image.sh builds the image an environment hub's package starts FROM
# (deploy/openenv/server/Dockerfile), without any registry, and prints its tag:
#
#   medgym/env-hub:<digest>  (also :latest)  the services image of
#                            scripts/compose-images.sh (Debian's Python stack,
#                            the binaries, bubblewrap) plus the task library
#                            (build/library: agent and verifier trees) at
#                            /library and the shared data folder at /data
#                            (MedCalc-Bench's rows are read from it), both
#                            readable by any user
#
#   scripts/hub-image.sh [BIN_DIR]    BIN_DIR as compose-images.sh's (default bin/)
#
# The tag is a digest of the services image, the library's two tree manifests
# (each a hash of every file in its tree), the data folder's files and this
# script, so an unchanged image is reused. Needs what compose-images.sh needs,
# and make library. What goes into the image is public to whoever can pull it:
# the verifier tree holds every task's answer (docs/how-to/publish-to-an-environment-hub.md).
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
DOCKER="${DOCKER:-docker}"
LIBRARY="${MEDGYM_LIBRARY:-$HERE/build/library}"
DATA="${MEDGYM_DATA:-$(cd "$HERE/.." && pwd)/shared/data}"

for f in "$LIBRARY/agent/AGENT_TREE.json" "$LIBRARY/verifier/VERIFIER_TREE.json"; do
  [ -f "$f" ] || { echo "hub-image: $f is missing; run make library" >&2; exit 1; }
done
[ -d "$DATA/medcalcbench" ] || { echo "hub-image: no data folder at $DATA (set MEDGYM_DATA)" >&2; exit 1; }

BASE="$("$HERE/scripts/compose-images.sh" "$@" | sed -n 's/^MEDGYM_IMAGE=//p')"
[ -n "$BASE" ] || { echo "hub-image: compose-images.sh named no services image" >&2; exit 1; }
BASE_ID="$("$DOCKER" image inspect -f '{{.Id}}' "$BASE")"

DATA_SUM="$(cd "$DATA" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)"
TAG="medgym/env-hub:$(printf '%s\n%s\n' "$BASE_ID" "$DATA_SUM" |
  cat - "$LIBRARY/agent/AGENT_TREE.json" "$LIBRARY/verifier/VERIFIER_TREE.json" "$0" | sha256sum | cut -c1-16)"
if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  echo "hub-image: $TAG exists" >&2
else
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/medgym-hub-image.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  mkdir -p "$WORK/ctx"
  # One layer, root-owned, world-readable, with fixed times: the same
  # inputs give the same bytes.
  tar --sort=name --numeric-owner --owner=0 --group=0 --mode='a+rX,go-w' --mtime='2000-01-01 00:00:00Z' \
    --transform 's,^agent,library/agent,;s,^verifier,library/verifier,' -C "$LIBRARY" -cf "$WORK/ctx/layer.tar" agent verifier
  tar --sort=name --numeric-owner --owner=0 --group=0 --mode='a+rX,go-w' --mtime='2000-01-01 00:00:00Z' \
    --transform 's,^\.,data,' -C "$DATA" -rf "$WORK/ctx/layer.tar" .
  # The base's user (65534), working folder (/tmp) and empty entrypoint stand.
  printf 'FROM %s\nADD layer.tar /\nCMD ["medgym", "env", "serve", "--help"]\n' "$BASE" >"$WORK/ctx/Dockerfile"
  # The classic builder, as compose-images.sh: the base is local, nothing is pulled.
  (cd "$WORK/ctx" && DOCKER_BUILDKIT=0 "$DOCKER" build -q --label "medgym.base=$BASE" -t "$TAG" -f Dockerfile . >/dev/null)
  "$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' medgym/env-hub | grep -vxF -e "$TAG" -e medgym/env-hub:latest |
    xargs -r "$DOCKER" image rm >/dev/null 2>&1 || true
  echo "hub-image: built $TAG" >&2
fi
"$DOCKER" tag "$TAG" medgym/env-hub:latest
echo "$TAG"
