#!/usr/bin/env bash
# test-harbor.sh: the Harbor export against the real `harbor` package (clients/python/tests/test_harbor_export.py):
# the oracle scores 1.0 on every exported task through medgym's verifier, a spy agent finds no answer key and no
# network, and the same tasks through `medgym run --policy reference` get the same rewards (parity). harbor needs
# Python >= 3.12: its venv (requirements/harbor.txt) is made and run inside the Python 3.13 runtime of
# scripts/py313.sh, kept in ~/.cache/medgym/venvs/harbor-<hash of the file>. Needs bin/medgym (make build),
# build/library (make library), a running Docker engine (scripts/docker.sh start), debootstrap and bubblewrap.
#   HARBOR_DATASETS  datasets whose first test task is exported (default: npowerai,clinical_ml,treqs; make
#                    test-harbor-all: every dataset of the library)
#   PYTEST_ARGS      more pytest arguments, shell-quoted
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export MEDGYM_BIN=${MEDGYM_BIN:-$root/bin/medgym} MEDGYM_LIBRARY=${MEDGYM_LIBRARY:-$root/build/library}
[ -x "$MEDGYM_BIN" ] || { echo "test-harbor: $MEDGYM_BIN is missing (make build)" >&2; exit 1; }
venvs=${HARBOR_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/medgym/venvs}
want=harbor-$(sha256sum requirements/harbor.txt | cut -c1-12)
for old in "$venvs"/harbor-*; do [ "$old" = "$venvs/$want" ] || [ ! -d "$old" ] || rm -rf "$old"; done
start=$(date +%s)
scripts/py313.sh venv "$venvs/$want" requirements/harbor.txt
echo "test-harbor: Python 3.13 runtime and $venvs/$want ready in $(( $(date +%s) - start ))s"
start=$(date +%s)
eval "$(scripts/harbor-images.sh "$MEDGYM_BIN")"
export MEDGYM_HARBOR_IMAGE MEDGYM_HARBOR_VERIFIER_IMAGE
echo "test-harbor: images $MEDGYM_HARBOR_IMAGE, $MEDGYM_HARBOR_VERIFIER_IMAGE ready in $(( $(date +%s) - start ))s"
eval "extra=(${PYTEST_ARGS:-})"
start=$(date +%s) rc=0
# The harbor package missing from its venv is a failure (the tests would skip).
scripts/py313.sh run "$venvs/$want/bin/python" -c "import harbor" || { echo "test-harbor: harbor is not importable" >&2; exit 1; }
scripts/py313.sh run "$venvs/$want/bin/python" -m pytest -p no:cacheprovider -q -rs "${extra[@]}" \
  clients/python/tests/test_harbor_export.py || rc=$?
echo "test-harbor: test_harbor_export.py: exit $rc in $(( $(date +%s) - start ))s"
exit $rc
