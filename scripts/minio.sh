#!/usr/bin/env bash
# minio.sh runs a local MinIO server for development and manual tests.
#
#   scripts/minio.sh start   start MinIO on 127.0.0.1 with a free port and a temp data dir
#   scripts/minio.sh stop    stop it (by PID) and delete its data dir
#   scripts/minio.sh env     print the export lines for the running server
#
# State (endpoint, credentials, PID, data dir) is written to
# ${MEDGYM_MINIO_STATE:-${TMPDIR:-/tmp}/medgym-minio.env}, a shell file other
# scripts may source. The binary is ${MEDGYM_TOOLS:-$HOME/.cache/medgym/bin}/minio,
# built by scripts/setup.sh.
set -euo pipefail

TOOLS="${MEDGYM_TOOLS:-$HOME/.cache/medgym/bin}"
BIN="$TOOLS/minio"
STATE="${MEDGYM_MINIO_STATE:-${TMPDIR:-/tmp}/medgym-minio.env}"
USER_="${MINIO_ROOT_USER:-medgym}"
PASS_="${MINIO_ROOT_PASSWORD:-medgym-dev-secret}"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

running() {
  [ -f "$STATE" ] || return 1
  # shellcheck disable=SC1090
  . "$STATE"
  [ -n "${MEDGYM_MINIO_PID:-}" ] && kill -0 "$MEDGYM_MINIO_PID" 2>/dev/null
}

start() {
  if running; then
    echo "minio: already running (pid $MEDGYM_MINIO_PID) at $AWS_ENDPOINT_URL; state in $STATE"
    return 0
  fi
  if [ ! -x "$BIN" ]; then
    echo "minio: $BIN is missing; build it with scripts/setup.sh" >&2
    exit 1
  fi
  local port console data log
  port="$(free_port)"
  console="$(free_port)"
  data="$(mktemp -d "${TMPDIR:-/tmp}/medgym-minio.XXXXXX")"
  log="$data.log"
  MINIO_ROOT_USER="$USER_" MINIO_ROOT_PASSWORD="$PASS_" MINIO_BROWSER=off MINIO_UPDATE=off \
    nohup "$BIN" server "$data" --address "127.0.0.1:$port" --console-address "127.0.0.1:$console" --quiet \
    >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/minio/health/ready" >/dev/null; then
      cat >"$STATE" <<STATE_EOF
# written by scripts/minio.sh start
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export AWS_ACCESS_KEY_ID=$USER_
export AWS_SECRET_ACCESS_KEY=$PASS_
export AWS_REGION=us-east-1
MEDGYM_MINIO_PID=$pid
MEDGYM_MINIO_DATA=$data
MEDGYM_MINIO_LOG=$log
STATE_EOF
      echo "minio: ready at http://127.0.0.1:$port (pid $pid, data $data, log $log)"
      echo "minio: credentials and endpoint in $STATE (source it, or: eval \"\$($0 env)\")"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "minio: exited during start-up; log:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "minio: not ready after 30 s; stopping it (log: $log)" >&2
  kill "$pid" 2>/dev/null || true
  exit 1
}

stop() {
  if ! running; then
    echo "minio: not running"
    rm -f "$STATE"
    return 0
  fi
  kill "$MEDGYM_MINIO_PID"
  for _ in $(seq 1 100); do
    kill -0 "$MEDGYM_MINIO_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$MEDGYM_MINIO_PID" 2>/dev/null && kill -9 "$MEDGYM_MINIO_PID"
  rm -rf "$MEDGYM_MINIO_DATA" "$MEDGYM_MINIO_LOG"
  rm -f "$STATE"
  echo "minio: stopped (pid $MEDGYM_MINIO_PID)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env)
    running || { echo "minio: not running" >&2; exit 1; }
    grep '^export ' "$STATE"
    ;;
  *)
    echo "usage: $0 start|stop|env" >&2
    exit 2
    ;;
esac
