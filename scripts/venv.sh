#!/usr/bin/env bash
# venv.sh: make or update the project's Python virtual environment (.venv by default) from the pinned, layered
# requirement files in requirements/ (see requirements/README.md). Idempotent: a stamp holds the hash of the
# layers installed, so an up-to-date venv costs a hash and nothing else. pip's cache (~/.cache/pip) is reused.
#   VENV=DIR        where (default: <repo>/.venv)
#   VENV_LAYERS     requirement files in install order (default: requirements/train.txt)
#   (a layer file's "# pip-options: --no-deps" line installs it without dependencies: see requirements/README.md)
#   PYTHON          interpreter to base it on (default: /usr/bin/python3, else python3)
#   VENV_BASE       a venv whose packages this one sees below its own: a .pth file adds the base's site-packages
#                   after this venv's (a layer's packages shadow the base's), so a layer installs only what the base
#                   lacks. Chains: a base may have a base. e.g. VENV=.venv-env VENV_BASE=.venv VENV_LAYERS=requirements/env-base.txt
#   VENV_BASE_LAYERS  when set, the base is first brought up to date with these layers (a base without a base of its
#                   own); otherwise the base must exist already (make the chain from the bottom up)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$root/.venv}
layers=${VENV_LAYERS:-requirements/train.txt}
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)

base=${VENV_BASE:-}
if [ -n "$base" ]; then
  case $base in /*) ;; *) base=$root/$base ;; esac
  [ "$(cd "$(dirname "$venv")" 2>/dev/null && pwd)/$(basename "$venv")" != "$base" ] || { echo "venv: VENV_BASE is VENV" >&2; exit 1; }
  if [ -n "${VENV_BASE_LAYERS:-}" ]; then
    VENV=$base VENV_BASE= VENV_BASE_LAYERS= VENV_LAYERS=$VENV_BASE_LAYERS "$0"
  fi
  [ -x "$base/bin/python" ] && [ -f "$base/.medgym-layers" ] || { echo "venv: the base $base is not made yet (scripts/venv.sh with VENV=$base first)" >&2; exit 1; }
fi
# What this venv is made of: its layers and, when layered, the base's path and what the base is made of.
want=$( (cd "$root" && cat $layers; [ -z "$base" ] || { echo "base=$base"; cat "$base/.medgym-layers"; }) | sha256sum | cut -d' ' -f1)
stamp=$venv/.medgym-layers
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  echo "venv: $venv is up to date"
  exit 0
fi
start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv" || { echo "venv: $py -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
fi
if [ -n "$base" ]; then
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  basesite=$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # An "import" line of a .pth file runs at start-up; addsitedir also reads the base's own .pth files (its base,
  # its editable installs).
  echo "import site; site.addsitedir('$basesite')" > "$site/_medgym_base.pth"
fi
for f in $layers; do
  echo "venv: installing $f"
  # A layer's "# pip-options: ..." line adds options pip does not take inside a requirement file (--no-deps for a
  # layer that pins its whole closure because its framework's metadata cannot resolve over the base).
  opts=$(sed -n 's/^# pip-options: //p' "$root/$f" | head -1)
  "$venv/bin/pip" install --quiet --disable-pip-version-check $opts -r "$root/$f"
done
echo "$want" > "$stamp"
echo "venv: $venv ready in $(( $(date +%s) - start ))s ($("$venv/bin/python" -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)' 2>/dev/null || echo "no torch"))"
