#!/usr/bin/env bash
# test-env.sh: the environment API's Python side (clients/python) against live `medgym env serve` processes.
# The tests start their own servers (bin/medgym, on free loopback ports, with their own state and store; see
# clients/python/tests/conftest.py), so this script only makes the venv and runs pytest: .venv-env is
# requirements/env-base.txt over .venv (scripts/venv.sh, VENV_BASE), the medgym package is installed into it from
# clients/python as a user would, then ruff and mypy over it, the extras' install check (scripts/check_extras.py) and
# pytest clients/python/tests (the client, Gymnasium, TRL, schemathesis; the
# other frameworks' adapter tests skip here: scripts/test-adapters.sh runs them in their own venvs), then
# scripts/test-doors.sh (the OpenEnv and MCP doors with openenv's and mcp's own clients, in their venvs).
# Needs bin/medgym (make build) and build/library (make library). PYTEST_ARGS adds pytest arguments, shell-quoted
# (PYTEST_ARGS='-k "gym or limits"').
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export MEDGYM_BIN=${MEDGYM_BIN:-$root/bin/medgym} MEDGYM_LIBRARY=${MEDGYM_LIBRARY:-$root/build/library}
export TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
[ -x "$MEDGYM_BIN" ] || { echo "test-env: $MEDGYM_BIN is missing (make build)" >&2; exit 1; }

scripts/venv.sh
VENV=$root/.venv-env VENV_BASE=$root/.venv VENV_LAYERS=requirements/env-base.txt scripts/venv.sh
# As a user installs it (pip builds it in an isolated environment: setuptools from PyPI); --force-reinstall: this
# checkout's sources.
.venv-env/bin/pip install --quiet --no-deps --force-reinstall ./clients/python

# Lint (ruff's default rules) and types (mypy) of the client package, as in any Python project's CI.
.venv-env/bin/ruff check clients/python
.venv-env/bin/mypy --config-file clients/python/pyproject.toml clients/python/medgym clients/python/medgym_verifiers

# Installs: every extra of clients/python (medgym[gym], [trl], [skyrl], [verifiers], [verl], [openrlhf]) resolves
# with requirements/constraints.txt in a fresh venv to the tested pins, and medgym[gym] and medgym[skyrl] install
# into fresh venvs and import (scripts/check_extras.py: pip's resolution against PyPI, no torch download; about 2
# minutes of CPU, 2.5 minutes on an idle 2-core machine with a warm pip cache). CHECK_EXTRAS=0 skips it.
[ "${CHECK_EXTRAS:-1}" = 0 ] || .venv-env/bin/python scripts/check_extras.py

eval "extra=(${PYTEST_ARGS:-})"
start=$(date +%s) rc=0
.venv-env/bin/python -m pytest -p no:cacheprovider -q -rs "${extra[@]}" clients/python/tests || rc=$?
echo "test-env: pytest clients/python/tests: exit $rc in $(( $(date +%s) - start ))s"
# The OpenEnv and MCP doors, with those packages' own clients (each in a venv of its own over .venv-env).
scripts/test-doors.sh || rc=1
exit $rc
