#!/usr/bin/env bash
# test-hub.sh: medgym's OpenEnv hub package (deploy/openenv) checked as the hub would, with OpenEnv's own package
# (openenv 0.10.0, requirements/env-openenv.txt, in a venv of its own over .venv-env): `openenv validate --level
# static`, the layout push and the multi-mode check expect, and the runtime level against the image the validator
# builds from server/Dockerfile (clients/python/tests/test_hub_openenv.py). Builds the hub base image first
# (scripts/hub-image.sh: needs bin/ from make build, build/library from make library, a Docker engine). Nothing is
# pushed and nothing is pulled.
#   HUB_VENVS  where the venv lives (default: ~/.cache/medgym/venvs, as hub-openenv-<hash of the layer file>)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
MEDGYM_HUB_IMAGE=$(scripts/hub-image.sh)
export MEDGYM_HUB_IMAGE
echo "test-hub: $MEDGYM_HUB_IMAGE ready in $(( $(date +%s) - start ))s"
venvs=${HUB_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/medgym/venvs}
mkdir -p "$venvs"
want=hub-openenv-$(sha256sum requirements/env-openenv.txt | cut -c1-12)
for old in "$venvs"/hub-openenv-*; do [ "$old" = "$venvs/$want" ] || [ ! -d "$old" ] || rm -rf "$old"; done
start=$(date +%s)
# The base the layer sits on, as scripts/test-env.sh makes it (a no-op when up to date).
scripts/venv.sh
VENV=$root/.venv-env VENV_BASE=$root/.venv VENV_LAYERS=requirements/env-base.txt scripts/venv.sh
VENV=$venvs/$want VENV_BASE=$root/.venv-env VENV_LAYERS=requirements/env-openenv.txt scripts/venv.sh
echo "test-hub: $venvs/$want ready in $(( $(date +%s) - start ))s"
"$venvs/$want/bin/python" -c "import openenv.cli.__main__" || { echo "test-hub: openenv's CLI is not importable in $venvs/$want" >&2; exit 1; }
start=$(date +%s)
rc=0
"$venvs/$want/bin/python" -m pytest -p no:cacheprovider -q -rs clients/python/tests/test_hub_openenv.py || rc=1
echo "test-hub: test_hub_openenv.py in $(( $(date +%s) - start ))s"
exit $rc
