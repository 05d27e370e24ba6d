#!/usr/bin/env bash
# harbor-images.sh builds the two base images exported Harbor tasks start FROM, without any registry, and prints
# them as KEY=VALUE lines:
#
#   MEDGYM_HARBOR_IMAGE           the agent's: the sandbox image (scripts/sandbox-image.sh: Debian's Python stack)
#   MEDGYM_HARBOR_VERIFIER_IMAGE  the verifier's: the sandbox image plus the medgym binary (harbor-verify)
#
#   scripts/harbor-images.sh [MEDGYM_BINARY]   (default: bin/medgym, `make build`)
#
# Pass them to `medgym export --format harbor --image ... --verifier-image ...`. Each tag is a digest of its
# inputs, so an image is built once and reused until they change. Needs a running engine (scripts/docker.sh start).
# Harbor on a cloud sandbox (Daytona, Modal, ...) needs both images in a registry it can pull from.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${1:-$HERE/bin/medgym}"
DOCKER="${DOCKER:-docker}"
REPO="${MEDGYM_HARBOR_VERIFIER_REPO:-medgym/harbor-verifier}"
[ -x "$BIN" ] || { echo "harbor-images: $BIN is missing (make build)" >&2; exit 1; }
SANDBOX="$("$HERE/scripts/sandbox-image.sh")"
DIGEST="$( { echo "$SANDBOX"; sha256sum "$BIN" | cut -d' ' -f1; cat "$0"; } | sha256sum | cut -c1-16)"
TAG="$REPO:$DIGEST"
if ! "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/medgym-harbor-image.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  cp "$BIN" "$WORK/medgym"
  cat >"$WORK/Dockerfile" <<EOF
FROM $SANDBOX
COPY medgym /usr/local/bin/medgym
USER root
RUN /usr/local/bin/medgym harbor-verify -h 2>/dev/null; [ \$? -ne 127 ]
EOF
  # A binary whose libraries are missing exits 127 (the loader): the build fails.
  "$DOCKER" build -q -t "$TAG" "$WORK" >/dev/null
  echo "harbor-images: built $TAG" >&2
  # Older verifier images (an earlier medgym binary) go; one in use by a container stays (rmi refuses).
  "$DOCKER" images --format '{{.Repository}}:{{.Tag}}' "$REPO" | grep -vxF "$TAG" | xargs -r "$DOCKER" rmi >/dev/null 2>&1 || true
fi
echo "MEDGYM_HARBOR_IMAGE=$SANDBOX"
echo "MEDGYM_HARBOR_VERIFIER_IMAGE=$TAG"
