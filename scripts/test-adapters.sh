#!/usr/bin/env bash
# test-adapters.sh: the SkyRL-gym, verifiers, verl and OpenRLHF adapters' tests (clients/python/tests/
# test_adapter_<framework>.py), each in its framework's venv: a layer over .venv (requirements/env-<framework>.txt,
# made by venv.sh under $ADAPTERS_VENVS, a no-op while the layer is unchanged), all against one live
# `bin/medgym env serve` started here on a free loopback port with a temporary store. MEDGYM_REQUIRE makes a
# framework missing from its venv a failure, not a skip. Prints each venv's and each run's time.
#   FRAMEWORKS   which (default: skyrl verifiers verl openrlhf)
#   VENV_BASE      the base venv the layers sit on (default: <repo>/.venv, made by `make venv`)
#   ADAPTERS_VENVS where the layers live (default: ~/.cache/medgym/venvs, as <framework>-<hash of its file>)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
frameworks=${FRAMEWORKS:-skyrl verifiers verl openrlhf}
base=${VENV_BASE:-$root/.venv}
export MEDGYM_LIBRARY=${MEDGYM_LIBRARY:-$root/build/library}
[ -x bin/medgym ] || { echo "test-adapters: bin/medgym is missing: make build" >&2; exit 1; }

# The layers live outside the checkout, named by their requirement file's hash, so a fresh clone (CI) finds them
# built: venv.sh then only re-points them at this checkout's base (~30 s instead of minutes); a changed file makes
# a new venv (no packages left over from the old one) and the old one is removed.
venvs=${ADAPTERS_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/medgym/venvs}
mkdir -p "$venvs"
declare -A py
VENV=$base VENV_BASE= VENV_BASE_LAYERS= VENV_LAYERS=requirements/train.txt scripts/venv.sh  # the base (train.txt): made here when missing, a no-op when up to date
for fw in $frameworks; do
  start=$(date +%s)
  want=$fw-$(sha256sum "requirements/env-$fw.txt" | cut -c1-12)
  for old in "$venvs/$fw"-*; do [ "$old" = "$venvs/$want" ] || [ ! -d "$old" ] || rm -rf "$old"; done
  VENV=$venvs/$want VENV_BASE=$base VENV_LAYERS=requirements/env-$fw.txt scripts/venv.sh
  py[$fw]=$venvs/$want/bin/python
  echo "test-adapters: $venvs/$want ready in $(( $(date +%s) - start ))s"
done

tmp=$(mktemp -d /tmp/medgym-adapters.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# --end-on both: the adapters' tests play reference solutions that end on an accepted code run (clients/python/tests/
# conftest.py LEGACY_RULE); medgym's default, end_on answer, is tested in the Go suite against the real server.
bin/medgym env serve --addr "127.0.0.1:$port" --store "$tmp/store" --state "$tmp/state" \
  --library "$MEDGYM_LIBRARY" --dataset medcalcbench --end-on both >"$tmp/server.log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
for _ in $(seq 1 600); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/server.log"; echo "test-adapters: medgym env serve exited" >&2; exit 1; }
  sleep 0.3
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || { cat "$tmp/server.log"; exit 1; }

status=0
first=${frameworks%% *}
PYTHONPATH=$root/clients/python "${py[$first]}" -m pytest -q -p no:cacheprovider \
  clients/python/tests/test_adapters_common.py || status=1
for fw in $frameworks; do
  start=$(date +%s)
  MEDGYM_URL="http://127.0.0.1:$port" MEDGYM_STORE="$tmp/store" MEDGYM_REQUIRE=$fw PYTHONPATH=$root/clients/python \
    "${py[$fw]}" -m pytest -q -p no:cacheprovider "clients/python/tests/test_adapter_$fw.py" || status=1
  echo "test-adapters: $fw tests in $(( $(date +%s) - start ))s"
done
exit $status
