#!/usr/bin/env bash
# fhir-server.sh builds and runs medgym's FHIR R4 server (deploy/fhir-server: HAPI FHIR's
# RestfulServer on embedded Jetty, resources in memory; docs/adr/0038-fhir-server.md).
#
#   scripts/fhir-server.sh build   build the jar with Maven unless the cache has it; print its path
#   scripts/fhir-server.sh start   build if needed, start the server on 127.0.0.1, load the NDJSON
#                                  folder once and wait until it serves; print its base URL
#   scripts/fhir-server.sh stop    stop it (by PID) and delete its log
#   scripts/fhir-server.sh env     print the export line of the running server (MEDGYM_FHIR_URL)
#
# Settings (environment):
#   MEDGYM_FHIR_DATA       the NDJSON folder to load (default build/fhir/mimic-iv-demo, which
#                          `make fhir` writes)
#   MEDGYM_FHIR_PORT       the port (default: a free one)
#   MEDGYM_FHIR_JAVA_OPTS  JVM options (default: -Xmx1g -XX:+UseSerialGC)
#   MEDGYM_FHIR_STATE      the state file, a shell file other scripts may source
#                          (default ${TMPDIR:-/tmp}/medgym-fhir.env)
#   MEDGYM_CACHE           the cache root (default $HOME/.cache/medgym): the jar is kept as
#                          $MEDGYM_CACHE/fhir-server/<digest>/fhir-server.jar, the digest being the
#                          SHA-256 of the Maven project's files and the Java version; Maven's own
#                          cache is ~/.m2 as usual
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT="$ROOT/deploy/fhir-server"
CACHE="${MEDGYM_CACHE:-$HOME/.cache/medgym}/fhir-server"
STATE="${MEDGYM_FHIR_STATE:-${TMPDIR:-/tmp}/medgym-fhir.env}"
DATA="${MEDGYM_FHIR_DATA:-$ROOT/build/fhir/mimic-iv-demo}"
JAVA_OPTS="${MEDGYM_FHIR_JAVA_OPTS:--Xmx1g -XX:+UseSerialGC}"

need() {
  command -v "$1" >/dev/null || { echo "fhir-server: $1 is not on PATH ($2)" >&2; exit 1; }
}

digest() {
  {
    (cd "$PROJECT" && find pom.xml src -type f | LC_ALL=C sort | xargs sha256sum)
    java -version 2>&1 | head -1
  } | sha256sum | cut -c1-16
}

build() {
  need java "a JDK 17 or newer runs the server"
  local jar
  jar="$CACHE/$(digest)/fhir-server.jar"
  if [ ! -f "$jar" ]; then
    need mvn "Maven builds the server from Maven Central"
    echo "fhir-server: building $jar with Maven (a cold build downloads HAPI FHIR and Jetty into ~/.m2)" >&2
    local out
    out="$(mktemp -d "${TMPDIR:-/tmp}/medgym-fhir-build.XXXXXX")"
    # Build in a copy so that concurrent builds (and the checkout) never share a target/.
    cp -r "$PROJECT/pom.xml" "$PROJECT/src" "$out/"
    if ! (cd "$out" && mvn -q -B -Dstyle.color=never -DskipTests package) >"$out/build.log" 2>&1; then
      echo "fhir-server: the Maven build failed ($out/build.log):" >&2
      tail -n 40 "$out/build.log" >&2
      exit 1
    fi
    mkdir -p "$(dirname "$jar")"
    cp "$out/target/fhir-server.jar" "$jar.tmp.$$"
    mv "$jar.tmp.$$" "$jar"
    rm -rf "$out"
  fi
  echo "$jar"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

running() {
  [ -f "$STATE" ] || return 1
  # shellcheck disable=SC1090
  . "$STATE"
  [ -n "${MEDGYM_FHIR_PID:-}" ] && kill -0 "$MEDGYM_FHIR_PID" 2>/dev/null
}

start() {
  if running; then
    echo "fhir-server: already running (pid $MEDGYM_FHIR_PID) at $MEDGYM_FHIR_URL; state in $STATE" >&2
    echo "$MEDGYM_FHIR_URL"
    return 0
  fi
  if [ ! -f "$DATA/MANIFEST.json" ]; then
    echo "fhir-server: no FHIR data at $DATA (make fhir writes build/fhir/mimic-iv-demo)" >&2
    exit 1
  fi
  local jar port log
  jar="$(build)"
  port="${MEDGYM_FHIR_PORT:-$(free_port)}"
  log="$(mktemp "${TMPDIR:-/tmp}/medgym-fhir.XXXXXX.log")"
  # shellcheck disable=SC2086
  nohup java $JAVA_OPTS -jar "$jar" --host 127.0.0.1 --port "$port" --data "$DATA" >"$log" 2>&1 &
  local pid=$!
  # Loading the demo takes tens of seconds on two busy cores: wait for the ready line, or the
  # process's end.
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q '^medgym-fhir-server ready: ' "$log"; then
      local url
      url="$(sed -n 's/^medgym-fhir-server ready: \([^ ]*\).*/\1/p' "$log")"
      cat >"$STATE" <<STATE_EOF
# written by scripts/fhir-server.sh start
export MEDGYM_FHIR_URL=$url
MEDGYM_FHIR_PID=$pid
MEDGYM_FHIR_LOG=$log
MEDGYM_FHIR_JAR=$jar
STATE_EOF
      grep '^medgym-fhir-server ready: ' "$log" >&2
      echo "$url"
      return 0
    fi
    sleep 0.5
  done
  echo "fhir-server: the server exited before it was ready; its log ($log):" >&2
  tail -n 40 "$log" >&2
  exit 1
}

stop() {
  if running; then
    kill "$MEDGYM_FHIR_PID"
    while kill -0 "$MEDGYM_FHIR_PID" 2>/dev/null; do sleep 0.2; done
    echo "fhir-server: stopped pid $MEDGYM_FHIR_PID" >&2
    rm -f "${MEDGYM_FHIR_LOG:-}"
  fi
  rm -f "$STATE"
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  env) running && echo "export MEDGYM_FHIR_URL=$MEDGYM_FHIR_URL" ;;
  *) echo "usage: $0 build|start|stop|env" >&2; exit 2 ;;
esac
