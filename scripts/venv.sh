#!/usr/bin/env bash
# venv.sh: make or update the project's Python virtual environment (.venv by default) from the pinned, layered
# requirement files in requirements/ (see requirements/README.md). Idempotent: a stamp holds the hash of the
# layers installed, so an up-to-date venv costs a hash and nothing else. pip's cache (~/.cache/pip) is reused.
#   VENV=DIR        where (default: <repo>/.venv)
#   VENV_LAYERS     requirement files in install order (default: requirements/train.txt)
#   PYTHON          interpreter to base it on (default: /usr/bin/python3, else python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$root/.venv}
layers=${VENV_LAYERS:-requirements/train.txt}
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)

want=$(cd "$root" && cat $layers | sha256sum | cut -d' ' -f1)
stamp=$venv/.medgym-layers
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  echo "venv: $venv is up to date"
  exit 0
fi
start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv" || { echo "venv: $py -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
fi
for f in $layers; do
  echo "venv: installing $f"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/$f"
done
echo "$want" > "$stamp"
echo "venv: $venv ready in $(( $(date +%s) - start ))s ($("$venv/bin/python" -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'))"
