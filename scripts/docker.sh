#!/usr/bin/env bash
# docker.sh starts or stops a local Docker engine for the sandbox's docker
# backend (machines without systemd; Debian's docker.io package).
#
#   scripts/docker.sh start    start dockerd in the background (idempotent), wait for the socket
#   scripts/docker.sh stop     stop the dockerd this script started (by PID)
#   scripts/docker.sh status   exit 0 when the engine answers
#
# Data root: ${MEDGYM_DOCKER_ROOT:-/var/lib/medgym-docker}; PID file and log:
# ${MEDGYM_DOCKER_RUN:-/run/medgym-docker}/dockerd.{pid,log}. Socket: /var/run/docker.sock.
# Install once: apt-get install -y --no-install-recommends docker.io debootstrap
set -euo pipefail

ROOT="${MEDGYM_DOCKER_ROOT:-/var/lib/medgym-docker}"
RUN="${MEDGYM_DOCKER_RUN:-/run/medgym-docker}"
PIDFILE="$RUN/dockerd.pid"
LOG="$RUN/dockerd.log"
SOCK=/var/run/docker.sock
DOCKERD="${DOCKERD:-$(command -v dockerd || echo /usr/sbin/dockerd)}"
# Talk to the engine with Debian's client when the newer one on PATH is
# missing; both negotiate the API version.
DOCKER="${DOCKER:-$(command -v docker || echo /usr/bin/docker)}"

answers() { "$DOCKER" -H "unix://$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ours() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

start() {
  if answers; then
    echo "docker: engine already answers on $SOCK"
    return 0
  fi
  if ours; then
    echo "docker: dockerd (pid $(cat "$PIDFILE")) is starting; waiting"
  else
    if [ ! -x "$DOCKERD" ]; then
      echo "docker: dockerd not found; install it with: apt-get install -y --no-install-recommends docker.io" >&2
      exit 1
    fi
    mkdir -p "$ROOT" "$RUN"
    # A stale pid file or socket from a killed engine would block the start.
    rm -f "$PIDFILE"
    [ -S "$SOCK" ] && rm -f "$SOCK"
    nohup "$DOCKERD" --data-root "$ROOT" --pidfile "$PIDFILE" -H "unix://$SOCK" >"$LOG" 2>&1 &
    # dockerd writes the pid file itself; keep ours too in case it dies early.
    echo $! >"$PIDFILE.launcher"
  fi
  for _ in $(seq 1 300); do
    if answers; then
      echo "docker: engine ready on $SOCK (data root $ROOT, log $LOG)"
      return 0
    fi
    if ! kill -0 "$(cat "$PIDFILE.launcher" 2>/dev/null || echo 0)" 2>/dev/null && ! ours; then
      echo "docker: dockerd exited; last lines of $LOG:" >&2
      tail -n 20 "$LOG" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
  echo "docker: engine did not answer within 30 s; see $LOG" >&2
  exit 1
}

stop() {
  local pid=""
  if [ -f "$PIDFILE" ]; then pid="$(cat "$PIDFILE")"; elif [ -f "$PIDFILE.launcher" ]; then pid="$(cat "$PIDFILE.launcher")"; fi
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    echo "docker: not running (no live pid in $PIDFILE)"
    rm -f "$PIDFILE" "$PIDFILE.launcher"
    return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "docker: dockerd $pid ignored SIGTERM for 20 s; sending SIGKILL" >&2
    kill -KILL "$pid"
  fi
  rm -f "$PIDFILE" "$PIDFILE.launcher"
  echo "docker: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) answers ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
