#!/usr/bin/env bash
# setup.sh installs everything medgym needs on a fresh Debian 12 machine.
# Idempotent: each step checks whether its result is already there.
#
#   scripts/setup.sh            Debian packages + Go tools (nats-server, minio)
#   SKIP_MINIO=1 scripts/setup.sh   skip the MinIO test server (3.5 min build)
#   WITH_DOCKER=1 scripts/setup.sh  also install the Docker engine, and build Compose v2
#   WITH_VM=1 scripts/setup.sh      also QEMU, a kernel and busybox for the cgroup v2 tests (scripts/cgroup2-vm.sh)
#   WITH_FHIR=1 scripts/setup.sh    also a JDK 17 and Maven for the FHIR server (scripts/fhir-server.sh)
set -euo pipefail

TOOLS="${MEDGYM_TOOLS:-$HOME/.cache/medgym/bin}"
mkdir -p "$TOOLS"

apt_pkgs=(bubblewrap python3 python3-pandas python3-numpy python3-scipy python3-sklearn
  python3-statsmodels python3-biopython python3-torch python3-venv sqlite3 curl ca-certificates)
if [ "${WITH_DOCKER:-0}" = 1 ]; then apt_pkgs+=(docker.io debootstrap); fi
if [ "${WITH_VM:-0}" = 1 ]; then apt_pkgs+=(qemu-system-x86 linux-image-amd64 busybox-static xfsprogs); fi
if [ "${WITH_FHIR:-0}" = 1 ]; then apt_pkgs+=(openjdk-17-jdk-headless maven); fi

missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x "$TOOLS/nats-server" ]; then
  echo "setup: building nats-server v2.15.3 into $TOOLS"
  GOBIN="$TOOLS" GOWORK=off go install github.com/nats-io/nats-server/v2@v2.15.3
fi
if [ "${SKIP_MINIO:-0}" != 1 ] && [ ! -x "$TOOLS/minio" ]; then
  echo "setup: building the MinIO test server into $TOOLS (about 3.5 minutes, once per machine)"
  GOBIN="$TOOLS" GOWORK=off GOFLAGS=-p=2 go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
fi
# Compose v2 for deploy/compose (TestComposeDeploy): Debian 12 ships only v1
# (1.29), which cannot give the sandbox-worker's container the unmasked /proc
# bubblewrap needs (security_opt systempaths=unconfined is a client-side
# option v1 passes to the engine as is, and the engine refuses it). Built
# from its Go module like the tools above (a copy of the module as the main
# module: its go.mod has exclude directives, which `go install pkg@v` refuses).
COMPOSE_VERSION=v2.40.3
if [ "${WITH_DOCKER:-0}" = 1 ] && [ ! -x "$TOOLS/docker-compose" ]; then
  echo "setup: building Docker Compose $COMPOSE_VERSION into $TOOLS (a few minutes, once per machine)"
  src="$(GOWORK=off go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  tmp="$(mktemp -d)"
  cp -r "$src/." "$tmp/" && chmod -R u+w "$tmp"
  (cd "$tmp" && GOWORK=off GOFLAGS=-p=2 go build -trimpath \
    -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" -o "$TOOLS/docker-compose.tmp" ./cmd)
  mv "$TOOLS/docker-compose.tmp" "$TOOLS/docker-compose"
  rm -rf "$tmp"
fi
echo "setup: done (tools in $TOOLS)"
