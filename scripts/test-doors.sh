#!/usr/bin/env bash
# test-doors.sh: the environment server's OpenEnv and MCP doors against the real client packages: OpenEnv's own
# client and validator (openenv, requirements/env-openenv.txt) and the official MCP Python SDK (mcp,
# requirements/env-mcp.txt), each in a venv of its own over .venv-env (the two cannot share one: openenv's fastmcp
# pins mcp<2). The layers live outside the checkout, named by their file's hash, as the adapters' do
# (scripts/test-adapters.sh). The tests start their own `medgym env serve` (clients/python/tests/doors.py).
# Called by scripts/test-env.sh after its own suite, .venv-env made; needs bin/medgym and build/library.
#   DOORS_VENVS  where the layers live (default: ~/.cache/medgym/venvs, as door-<layer>-<hash of its file>)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export MEDGYM_BIN=${MEDGYM_BIN:-$root/bin/medgym} MEDGYM_LIBRARY=${MEDGYM_LIBRARY:-$root/build/library}
[ -x "$MEDGYM_BIN" ] || { echo "test-doors: $MEDGYM_BIN is missing (make build)" >&2; exit 1; }
venvs=${DOORS_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/medgym/venvs}
mkdir -p "$venvs"
rc=0
for layer in openenv mcp; do
  start=$(date +%s)
  want=door-$layer-$(sha256sum "requirements/env-$layer.txt" | cut -c1-12)
  for old in "$venvs/door-$layer"-*; do [ "$old" = "$venvs/$want" ] || [ ! -d "$old" ] || rm -rf "$old"; done
  VENV=$venvs/$want VENV_BASE=$root/.venv-env VENV_LAYERS=requirements/env-$layer.txt scripts/venv.sh
  echo "test-doors: $venvs/$want ready in $(( $(date +%s) - start ))s"
  start=$(date +%s)
  # The package missing from its venv is a failure (the tests would skip).
  "$venvs/$want/bin/python" -c "import $layer" || { echo "test-doors: $layer is not importable in $venvs/$want" >&2; exit 1; }
  "$venvs/$want/bin/python" -m pytest -p no:cacheprovider -q -rs "clients/python/tests/test_door_$layer.py" || rc=1
  echo "test-doors: test_door_$layer.py in $(( $(date +%s) - start ))s"
done
exit $rc
