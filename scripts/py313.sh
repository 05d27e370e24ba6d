#!/usr/bin/env bash
# py313.sh: a Python 3.13 runtime for the packages that need Python >= 3.12 (harbor, nemo-gym), made from Debian
# trixie's packages without touching the host system: debootstrap into a cached folder, then commands run in it
# through bubblewrap, with this checkout, /tmp, ~/.cache/medgym, pip's cache and the Docker socket bound at the same
# paths (a tool that hands host paths to Docker, as Harbor does for its log folders, names paths the engine sees).
#
#   scripts/py313.sh root                  make the runtime if missing; print its folder
#   scripts/py313.sh run CMD [ARG...]      run CMD inside it (cwd: this checkout)
#   scripts/py313.sh venv VENV LAYER...    make or update a venv at VENV from requirement files (scripts/venv.sh
#                                          inside the runtime; VENV only runs inside it: its python is trixie's)
#
# Cache: ${PY313_CACHE:-~/.cache/medgym/py313}/<digest of the suite, packages and mirror> (the rootfs is ~270 MB; making
# it took 38 s on the 2-core machine). Needs root (debootstrap), debootstrap, bubblewrap, and the Debian mirror the
# host's apt uses (it serves trixie as well as bookworm). The host's CA bundle (/etc/ssl/certs) and pip's
# configuration are bound in read-only, so pip inside reaches PyPI as it does outside. Docker: the host's `docker`
# client (static) and the compose plugin ($MEDGYM_TOOLS/docker-compose, scripts/setup.sh WITH_DOCKER=1) are bound in
# when present, so `docker compose` inside talks to the host's engine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SUITE=trixie
PKGS=python3,python3-venv,ca-certificates,bash,coreutils
cache=${PY313_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/medgym/py313}
tools=${MEDGYM_TOOLS:-$HOME/.cache/medgym/bin}

mirror() {
  local m
  m=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n1)
  [ -n "$m" ] || m=$(grep -hsE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
    sed -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' | awk '{print $1}' | grep -v security | head -n1)
  [ -n "$m" ] || m=http://deb.debian.org/debian
  echo "$m"
}

make_root() {
  local mirror digest dir
  mirror=$(mirror)
  # The rootfs depends on what debootstrap is asked for, not on the rest of this script.
  digest=$(echo "$mirror $SUITE $PKGS" | sha256sum | cut -c1-16)
  dir=$cache/$digest
  if [ ! -f "$dir/rootfs.done" ]; then
    mkdir -p "$cache"
    exec 9>"$cache/.lock"
    flock 9
    if [ ! -f "$dir/rootfs.done" ]; then
      command -v debootstrap >/dev/null || { echo "py313: install debootstrap (apt-get install -y debootstrap)" >&2; exit 1; }
      for old in "$cache"/*/; do [ "$old" = "$dir/" ] || [ ! -d "$old" ] || rm -rf "$old"; done
      rm -rf "$dir" && mkdir -p "$dir"
      start=$(date +%s)
      echo "py313: debootstrap $SUITE from $mirror ($PKGS)" >&2
      debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$dir/rootfs" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
        echo "py313: debootstrap failed; last lines of $dir/debootstrap.log:" >&2
        tail -n 30 "$dir/debootstrap.log" >&2
        exit 1
      }
      mkdir -p "$dir/rootfs/usr/libexec/docker/cli-plugins" "$dir/rootfs$root" "$dir/rootfs$HOME/.cache"
      touch "$dir/rootfs.done"
      echo "py313: $dir/rootfs made in $(( $(date +%s) - start ))s" >&2
    fi
    exec 9>&-
  fi
  echo "$dir/rootfs"
}

run() {
  local rfs
  rfs=$(make_root)
  local args=(--bind "$rfs" / --dev /dev --proc /proc --bind /tmp /tmp
    --ro-bind /etc/resolv.conf /etc/resolv.conf
    --bind "$root" "$root" --chdir "$(pwd)"
    --setenv HOME "$HOME" --setenv PATH "/usr/local/bin:/usr/bin:/bin" --unsetenv PIP_FIND_LINKS --unsetenv VIRTUAL_ENV)
  mkdir -p "$HOME/.cache/medgym" "$HOME/.cache/pip"
  mkdir -p "$rfs$HOME/.cache/medgym" "$rfs$HOME/.cache/pip"
  args+=(--bind "$HOME/.cache/medgym" "$HOME/.cache/medgym" --bind "$HOME/.cache/pip" "$HOME/.cache/pip")
  [ ! -d /etc/ssl/certs ] || args+=(--ro-bind /etc/ssl/certs /etc/ssl/certs)
  [ ! -f /etc/pip.conf ] || args+=(--ro-bind /etc/pip.conf /etc/pip.conf)
  [ ! -S /var/run/docker.sock ] || args+=(--bind /var/run/docker.sock /run/docker.sock)
  local docker
  docker=$(command -v docker || true)
  [ -z "$docker" ] || args+=(--ro-bind "$(readlink -f "$docker")" /usr/local/bin/docker)
  [ ! -x "$tools/docker-compose" ] || args+=(--ro-bind "$tools/docker-compose" /usr/libexec/docker/cli-plugins/docker-compose)
  # The checkout may be a link farm (build/, .venv): bind the targets of its top-level links at their own paths.
  local l t
  for l in "$root"/* "$root"/.venv*; do
    [ -L "$l" ] || continue
    t=$(readlink -f "$l") || continue
    case $t in "$root"/*|/tmp/*) continue ;; esac
    [ -e "$t" ] || continue
    mkdir -p "$rfs$t" 2>/dev/null || true
    args+=(--bind "$t" "$t")
  done
  exec bwrap "${args[@]}" "$@"
}

case ${1:-} in
  root) make_root ;;
  run) shift; [ $# -gt 0 ] || { echo "usage: $0 run CMD [ARG...]" >&2; exit 2; }; run "$@" ;;
  venv)
    shift
    [ $# -ge 2 ] || { echo "usage: $0 venv VENV LAYER..." >&2; exit 2; }
    venv=$1; shift
    cd "$root"
    run env VENV="$venv" VENV_LAYERS="$*" PYTHON=/usr/bin/python3 scripts/venv.sh ;;
  *) echo "usage: $0 root | run CMD [ARG...] | venv VENV LAYER..." >&2; exit 2 ;;
esac
