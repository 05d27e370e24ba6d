#!/usr/bin/env bash
# sandbox-image.sh builds the docker backend's sandbox image from Debian
# packages, without any registry: debootstrap + docker import.
#
#   scripts/sandbox-image.sh           build if missing; print the image tag
#   scripts/sandbox-image.sh --force   rebuild even when the tag exists
#
# Needs root, debootstrap and a running engine (scripts/docker.sh start).
# Takes 2-3 min the first time; the rootfs cache lives under
# ${MEDGYM_IMAGE_CACHE:-/var/cache/medgym}. See deploy/sandbox-image/README.md.
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
PKGS_FILE="$HERE/deploy/sandbox-image/packages.txt"
# The one list of public copies of held-out task data; the bwrap backend masks the same paths.
MASKED_FILE="$HERE/services/sandbox-worker/sandbox/masked_paths.txt"
CACHE="${MEDGYM_IMAGE_CACHE:-/var/cache/medgym}/sandbox-image"
REPO="${MEDGYM_SANDBOX_IMAGE_REPO:-medgym/sandbox}"
SUITE=bookworm
DOCKER="${DOCKER:-docker}"
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

# mirror finds the Debian mirror the machine's apt uses for $SUITE (deb822
# .sources first, then one-line sources.list entries).
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$SUITE" '
      BEGIN { RS=""; FS="\n" }
      {
        uris=""; suites=""; types=""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/)   { sub(/^URIs:[ \t]*/, "", $i); uris=$i }
          if ($i ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", $i); suites=" " $i " " }
          if ($i ~ /^Types:/)  { types=$i }
        }
        if (types ~ /deb( |$)/ && suites ~ (" " suite " ")) { split(uris, u, /[ \t]+/); print u[1]; exit }
      }' "$f"
  done | head -n1 | grep . && return 0
  grep -hE "^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[a-z]+://[^[:space:]]+[[:space:]]+$SUITE[[:space:]]" \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    sed -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' | awk '{print $1; exit}' | grep . && return 0
  return 1
}

MIRROR="$(mirror)" || { echo "sandbox-image: no Debian $SUITE mirror in /etc/apt/sources.list{,.d/*}" >&2; exit 1; }
PKGS="$(grep -vE '^[[:space:]]*(#|$)' "$PKGS_FILE" | tr -s ' \n' ',' | sed 's/,$//')"
DIGEST="$( { cat "$PKGS_FILE" "$MASKED_FILE" "$0"; echo "$MIRROR $SUITE"; } | sha256sum | cut -c1-16)"
TAG="$REPO:$DIGEST"

# One build at a time: two concurrent runs (two test jobs on one machine) would
# delete each other's rootfs half-way.
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

if ! "$DOCKER" version >/dev/null 2>&1; then
  echo "sandbox-image: no Docker engine answers; start one with scripts/docker.sh start" >&2
  exit 1
fi
if [ "$FORCE" = 0 ] && "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  "$DOCKER" tag "$TAG" "$REPO:latest"
  echo "sandbox-image: $TAG exists (tagged latest); nothing to do" >&2
  echo "$TAG"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "sandbox-image: install debootstrap (apt-get install -y debootstrap)" >&2; exit 1; }

DIR="$CACHE/$DIGEST"
ROOTFS="$DIR/rootfs"
TAR="$DIR/rootfs.tar"
mkdir -p "$DIR"
if [ ! -f "$DIR/rootfs.done" ] || [ "$FORCE" = 1 ]; then
  # An interrupted debootstrap can leave /proc and /sys mounted in the tree.
  for m in proc sys; do mountpoint -q "$ROOTFS/$m" 2>/dev/null && umount -l "$ROOTFS/$m"; done
  rm -rf "$ROOTFS" "$TAR" "$DIR/rootfs.done"
  echo "sandbox-image: debootstrap $SUITE from $MIRROR with $PKGS (2-3 min)" >&2
  debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$ROOTFS" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 || {
    echo "sandbox-image: debootstrap failed; last lines of $DIR/debootstrap.log:" >&2
    tail -n 30 "$DIR/debootstrap.log" >&2
    exit 1
  }
  # Strip what code never needs, and what would only leak or bloat.
  rm -rf "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
    "$ROOTFS"/usr/share/locale/* "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin \
    "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/* "$ROOTFS"/tmp/* "$ROOTFS"/home
  # Delete the public copies of held-out task data (labelled test rows).
  while read -r pat; do
    case "$pat" in
      '' | '#'*) continue ;;
      /usr/*) ;;
      *) echo "sandbox-image: $MASKED_FILE: $pat is not under /usr/" >&2; exit 1 ;;
    esac
    for p in "$ROOTFS"$pat; do
      if [ -e "$p" ] || [ -L "$p" ]; then
        echo "sandbox-image: deleting ${p#"$ROOTFS"} (masked_paths.txt)" >&2
        rm -rf -- "$p"
      fi
    done
  done <"$MASKED_FILE"
  find "$ROOTFS/usr/lib/python3" -name __pycache__ -prune -o -name '*.pyc' -print0 2>/dev/null | xargs -0r rm -f
  mkdir -p "$ROOTFS/work" "$ROOTFS/data" "$ROOTFS/opt/medgym"
  chmod 0755 "$ROOTFS/work" "$ROOTFS/data"
  : >"$ROOTFS/etc/resolv.conf"
  touch "$DIR/rootfs.done"
fi
if [ ! -f "$TAR" ]; then
  # Sorted, owner-numeric, fixed-mtime tar: the same rootfs gives the same bytes.
  tar --sort=name --numeric-owner --mtime='2000-01-01 00:00:00Z' -C "$ROOTFS" -cf "$TAR.tmp" .
  mv "$TAR.tmp" "$TAR"
fi
SUM="$(sha256sum "$TAR" | cut -d' ' -f1)"
echo "sandbox-image: docker import ($(du -sh "$TAR" | cut -f1))" >&2
"$DOCKER" import \
  --change "LABEL medgym.recipe=$DIGEST medgym.rootfs-sha256=$SUM" \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8' \
  --change 'USER 65534:65534' --change 'WORKDIR /work' \
  --change 'CMD ["/usr/bin/python3"]' \
  "$TAR" "$TAG" >/dev/null
"$DOCKER" tag "$TAG" "$REPO:latest"
echo "sandbox-image: built $TAG (also $REPO:latest)" >&2
echo "$TAG"
