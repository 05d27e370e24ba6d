#!/usr/bin/env bash
# compose-images.sh builds the three images deploy/compose/compose.yaml runs,
# without any registry, and prints the variables that point the compose file
# at them (KEY=VALUE lines; `docker-compose --env-file`, or export them):
#
#   MEDGYM_NATS_IMAGE   FROM scratch: the nats-server binary setup.sh built, with
#                       the C library it links (docker import)
#   MEDGYM_MINIO_IMAGE  FROM scratch: the MinIO server binary setup.sh built, the same way
#   MEDGYM_IMAGE        the sandbox image (scripts/sandbox-image.sh: Debian's Python
#                       stack) plus the service binaries and bubblewrap
#
#   scripts/compose-images.sh [BIN_DIR]    BIN_DIR holds dispatcher, llm-worker,
#                                          sandbox-worker, verifier and optionally
#                                          medgym (default: bin/, `make build`)
#
# Each tag is a digest of what went into it, so an image is built once and
# reused until its inputs change (the engine's image store is the cache, as
# ~/.cache/medgym/bin is for the binaries). Needs a running engine
# (scripts/docker.sh start) and the sandbox image (scripts/sandbox-image.sh,
# which this script runs). Users with registry access do not need any of
# this: see deploy/compose/README.md.
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="${MEDGYM_TOOLS:-$HOME/.cache/medgym/bin}"
BIN="${1:-$HERE/bin}"
DOCKER="${DOCKER:-docker}"
BWRAP="${BWRAP:-$(command -v bwrap || echo /usr/bin/bwrap)}"
SERVICES=(dispatcher llm-worker sandbox-worker verifier)

"$DOCKER" version >/dev/null 2>&1 || { echo "compose-images: no Docker engine answers; start one with scripts/docker.sh start" >&2; exit 1; }
for f in "$TOOLS/nats-server" "$TOOLS/minio"; do
  [ -x "$f" ] || { echo "compose-images: $f is missing; build it with scripts/setup.sh (SKIP_MINIO=0)" >&2; exit 1; }
done
[ -x "$BWRAP" ] || { echo "compose-images: bubblewrap is missing (apt-get install -y bubblewrap)" >&2; exit 1; }
for s in "${SERVICES[@]}"; do
  [ -x "$BIN/$s" ] || { echo "compose-images: $BIN/$s is missing; run make build (or pass the folder holding the binaries)" >&2; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/medgym-images.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# digest names an image after the bytes of its inputs and of this script.
digest() { cat "$@" "$0" | sha256sum | cut -c1-16; }

# libs lists the shared objects (and the loader) an ELF binary needs, as
# absolute paths; nothing for a static one.
libs() { ldd "$1" 2>/dev/null | awk '/=> \//{print $3} /^[[:space:]]*\/[^ ]*ld-linux/{print $1}' | sort -u; }

# scratch_image REPO BINARY NAME: a FROM-scratch image holding /NAME, the
# libraries it links (at their paths) and an empty /tmp; entrypoint /NAME.
scratch_image() {
  local repo="$1" bin="$2" name="$3" tag root
  mapfile -t deps < <(libs "$bin")
  tag="$repo:$(digest "$bin" "${deps[@]}")"
  if "$DOCKER" image inspect "$tag" >/dev/null 2>&1; then
    echo "compose-images: $tag exists" >&2
    echo "$tag"
    return
  fi
  root="$WORK/$name"
  mkdir -p "$root/tmp" "$root/data"
  chmod 1777 "$root/tmp"
  cp "$bin" "$root/$name"
  for l in "${deps[@]}"; do
    mkdir -p "$root$(dirname "$l")"
    cp -L "$l" "$root$l"
  done
  tar --sort=name --numeric-owner --mtime='2000-01-01 00:00:00Z' -C "$root" -cf "$WORK/$name.tar" .
  "$DOCKER" import --change "ENTRYPOINT [\"/$name\"]" --change "LABEL medgym.binary-sha256=$(sha256sum "$bin" | cut -c1-64)" \
    "$WORK/$name.tar" "$tag" >/dev/null
  "$DOCKER" tag "$tag" "$repo:latest"
  echo "compose-images: built $tag (also $repo:latest)" >&2
  echo "$tag"
}

NATS_IMAGE="$(scratch_image medgym/nats "$TOOLS/nats-server" nats-server)"
MINIO_IMAGE="$(scratch_image medgym/minio "$TOOLS/minio" minio)"

# The services image: the sandbox image's Debian Python stack (what the
# bwrap backend runs agent code with) plus the binaries and bwrap, whose
# libraries (libselinux, libcap, libpcre2) the minbase rootfs already has.
BASE="$("$HERE/scripts/sandbox-image.sh")"
BASE_ID="$("$DOCKER" image inspect -f '{{.Id}}' "$BASE")"
mkdir -p "$WORK/stage/usr/local/bin" "$WORK/ctx"
for s in "${SERVICES[@]}"; do cp "$BIN/$s" "$WORK/stage/usr/local/bin/$s"; done
[ -x "$BIN/medgym" ] && cp "$BIN/medgym" "$WORK/stage/usr/local/bin/medgym" # the CLI too, where built
cp "$BWRAP" "$WORK/stage/usr/local/bin/bwrap"
TAG="medgym/medgym:$(echo "$BASE_ID" | cat - "$WORK"/stage/usr/local/bin/* "$0" | sha256sum | cut -c1-16)"
if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  echo "compose-images: $TAG exists" >&2
else
  tar --sort=name --numeric-owner --owner=0 --group=0 --mtime='2000-01-01 00:00:00Z' -C "$WORK/stage" -cf "$WORK/ctx/layer.tar" usr
  cat >"$WORK/ctx/Dockerfile" <<EOF
FROM $BASE
ADD layer.tar /
USER 65534:65534
WORKDIR /tmp
ENTRYPOINT []
CMD ["medgym", "--help"]
EOF
  # The classic builder: it needs neither BuildKit nor the buildx plugin,
  # and the base is local, so nothing is pulled.
  (cd "$WORK/ctx" && DOCKER_BUILDKIT=0 "$DOCKER" build -q --label "medgym.base=$BASE" -t "$TAG" -f Dockerfile . >/dev/null)
  # Keep one services image: older ones only fill the disk.
  "$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' medgym/medgym | grep -vxF -e "$TAG" -e medgym/medgym:latest |
    xargs -r "$DOCKER" image rm >/dev/null 2>&1 || true
  echo "compose-images: built $TAG" >&2
fi
"$DOCKER" tag "$TAG" medgym/medgym:latest

echo "MEDGYM_NATS_IMAGE=$NATS_IMAGE"
echo "MEDGYM_MINIO_IMAGE=$MINIO_IMAGE"
echo "MEDGYM_IMAGE=$TAG"
