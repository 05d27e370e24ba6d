#!/usr/bin/env bash
# test-harbor.sh: the Harbor export against the real `harbor` package (clients/python/tests/test_harbor_export.py):
# the oracle scores 1.0 on every exported task through medgym's verifier, a spy agent finds no answer key and no
# network, and the same tasks through `medgym run --policy reference` get the same rewards (parity); then medgym's
# NeMo Gym resources server with the real `nemo-gym` package's classes (test_nemo_gym.py). Both need Python >= 3.12
# and cannot share a venv: each (requirements/harbor.txt, requirements/nemo-gym.txt) is made and run inside the
# Python 3.13 runtime of scripts/py313.sh, kept in ~/.cache/medgym/venvs/<layer>-<hash of the file>. Needs bin/medgym (make build),
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
start=$(date +%s)
eval "$(scripts/harbor-images.sh "$MEDGYM_BIN")"
export MEDGYM_HARBOR_IMAGE MEDGYM_HARBOR_VERIFIER_IMAGE
echo "test-harbor: images $MEDGYM_HARBOR_IMAGE, $MEDGYM_HARBOR_VERIFIER_IMAGE ready in $(( $(date +%s) - start ))s"
eval "extra=(${PYTEST_ARGS:-})"
rc=0
# layer:module:test file
for spec in harbor:harbor:test_harbor_export.py nemo-gym:nemo_gym:test_nemo_gym.py; do
  IFS=: read -r layer module file <<<"$spec"
  want=$layer-$(sha256sum "requirements/$layer.txt" | cut -c1-12)
  for old in "$venvs/$layer"-*; do [ "$old" = "$venvs/$want" ] || [ ! -d "$old" ] || rm -rf "$old"; done
  start=$(date +%s)
  scripts/py313.sh venv "$venvs/$want" "requirements/$layer.txt"
  # The client package, as a user installs it (the NeMo Gym resources server is part of it).
  scripts/py313.sh run "$venvs/$want/bin/pip" install --quiet --no-deps --force-reinstall ./clients/python
  echo "test-harbor: Python 3.13 runtime and $venvs/$want ready in $(( $(date +%s) - start ))s"
  start=$(date +%s)
  # The package missing from its venv is a failure (the tests would skip).
  scripts/py313.sh run "$venvs/$want/bin/python" -c "import $module" || { echo "test-harbor: $module is not importable in $venvs/$want" >&2; exit 1; }
  scripts/py313.sh run "$venvs/$want/bin/python" -m pytest -p no:cacheprovider -q -rs "${extra[@]}" \
    "clients/python/tests/$file" || rc=1
  echo "test-harbor: $file in $(( $(date +%s) - start ))s"
done
exit $rc
