#!/usr/bin/env python3
"""check_extras.py: every extra of clients/python (medgym[gym], [trl], [skyrl], [verifiers], [verl], [openrlhf])
resolves with its constraints file (requirements/constraints.txt, or constraints-<framework>.txt: scripts/constraints.py)
in a fresh venv, to the versions the adapters are tested with.

1. Resolution, for each extra: ``pip install --dry-run --report`` of ``clients/python[extra]`` with the constraints
   in a fresh venv (pip resolves from PyPI's metadata: nothing is downloaded but metadata, nothing installed). Every
   package the resolution picks that the layer files pin must be at its pin, and the extra's own requirements must
   all be pinned there (so the framework, torch and transformers are checked, not only their transitive deps).
   For verl and openrlhf, installed with --no-deps (their metadata does not resolve over the tested numpy and
   transformers: clients/python/README.md), ``verl``/``openrlhf`` with --no-deps resolve to their pins too.
2. A real install and import, where that is cheap (no torch): medgym[gym] and medgym[skyrl] each into a fresh venv,
   then ``import medgym.gym`` / ``import medgym.skyrl``.

Resolutions and installs run side by side (they mostly wait on PyPI). Prints each step's time. Needs PyPI (pip's cache makes it fast). Exit 1 on any mismatch.
  EXTRAS=...  which extras (default: all six)   INSTALL=...  which to install for real (default: gym skyrl)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import constraints  # noqa: E402

CLIENT = ROOT / "clients" / "python"
NO_DEPS = {"verl": "verl", "openrlhf": "openrlhf"}  # the extras whose framework is installed with --no-deps
IMPORTS = {"gym": "medgym.gym", "skyrl": "medgym.skyrl", "trl": "medgym.trl", "verifiers": "medgym_verifiers"}
PIP = ["-m", "pip", "--disable-pip-version-check", "--no-input"]


def extras() -> dict[str, list[str]]:
    import tomllib

    return tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    py = path / "bin" / "python"
    # The client is built from source: setuptools in the venv, so each resolution skips pip's isolated build env.
    subprocess.run([str(py), *PIP, "install", "--quiet", "setuptools>=70.1"], check=True)
    return py


def resolve(py: Path, report: Path, extra: str, *args: str) -> list[dict]:
    subprocess.run(
        [str(py), *PIP, "install", "--quiet", "--dry-run", "--ignore-installed", "--no-build-isolation",
         "--report", str(report), "-c", str(constraints.output(extra)), *args],
        check=True,
    )
    return json.loads(report.read_text())["install"]


def requirement_name(req: str) -> str:
    from packaging.requirements import Requirement

    return constraints.canonical(Requirement(req).name)


def check(extra: str, reqs: list[str], installed: list[dict], pins: dict) -> list[str]:
    bad = []
    got = {constraints.canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in installed}
    for name, version in got.items():
        if name in pins and pins[name][1] != version and name != "medgym":
            bad.append(f"[{extra}] {name} resolved to {version}, the tested pin is {pins[name][1]}")
    for req in reqs:
        name = requirement_name(req)
        if name not in pins:
            bad.append(f"[{extra}] {req}: no layer file pins {name}")
        elif got.get(name) != pins[name][1]:
            bad.append(f"[{extra}] {req}: resolved to {got.get(name)}, the tested pin is {pins[name][1]}")
    unpinned = sorted(f"{n}=={v}" for n, v in got.items() if n not in pins and n != "medgym")
    if unpinned:
        print(f"check-extras: [{extra}] not pinned by requirements/ (the base's transitive deps): {' '.join(unpinned)}")
    return bad


def main() -> int:
    declared = extras()
    names = os.environ.get("EXTRAS", "gym trl skyrl verifiers verl openrlhf").split()
    real = os.environ.get("INSTALL", "gym skyrl").split()
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="medgym-extras.") as tmp:
        t0 = time.monotonic()
        py = venv(Path(tmp) / "resolve")
        print(f"check-extras: fresh venv in {time.monotonic() - t0:.0f}s", flush=True)

        def resolution(extra: str) -> list[str]:
            t = time.monotonic()
            if extra not in declared:
                return [f"[{extra}] clients/python/pyproject.toml has no such extra"]
            pins = constraints.pins(extra=extra)
            installed = resolve(py, Path(tmp) / f"{extra}.json", extra, f"{CLIENT}[{extra}]")
            found = check(extra, declared[extra], installed, pins)
            if extra in NO_DEPS:
                fw = NO_DEPS[extra]
                found += check(extra, [fw], resolve(py, Path(tmp) / f"{fw}.json", extra, "--no-deps", fw), pins)
            print(f"check-extras: [{extra}] resolved ({len(installed)} packages) in {time.monotonic() - t:.0f}s",
                  flush=True)
            return found

        def installs() -> list[str]:
            found = []
            for extra in real:  # one after another: each builds the client in its source tree
                t = time.monotonic()
                vpy = venv(Path(tmp) / f"install-{extra}")
                subprocess.run([str(vpy), *PIP, "install", "--quiet", "--no-build-isolation", "-c", str(constraints.output(extra)),
                                f"{CLIENT}[{extra}]"], check=True)
                r = subprocess.run([str(vpy), "-c", f"import {IMPORTS[extra]}"], cwd=tmp, capture_output=True,
                                   text=True)
                if r.returncode:
                    found.append(f"[{extra}] import {IMPORTS[extra]} failed after installing medgym[{extra}]:\n"
                                 f"{r.stderr}")
                print(f"check-extras: [{extra}] installed and imported in {time.monotonic() - t:.0f}s", flush=True)
            return found

        # pip's resolution mostly waits on the index and metadata, so the resolutions and the installs overlap.
        with ThreadPoolExecutor(max_workers=2) as pool:  # the CI machine has 2 cores
            jobs = [pool.submit(resolution, e) for e in names] + [pool.submit(installs)]
            for j in jobs:
                bad += j.result()
        print(f"check-extras: {len(names)} extras resolved, {len(real)} installed, in {time.monotonic() - t0:.0f}s")
    for b in bad:
        print("check-extras:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
