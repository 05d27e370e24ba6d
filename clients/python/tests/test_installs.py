"""The install story: requirements/constraints.txt is what the layer files pin (one source of truth), and every
extra of clients/python/pyproject.toml names only packages the layers pin, with ranges that hold the pin. No network:
scripts/check_extras.py (scripts/test-env.sh) resolves the extras against PyPI."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]


def _constraints():
    spec = importlib.util.spec_from_file_location("constraints", ROOT / "scripts" / "constraints.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("constraints", mod)
    spec.loader.exec_module(mod)
    return mod


constraints = _constraints()
EXTRAS = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.parametrize("extra", ["", *constraints.FRAMEWORKS])
def test_constraints_file_is_the_layers(extra):
    out = constraints.output(extra)
    assert out.read_text() == constraints.render(extra), f"{out.name} drifted from the layers: scripts/constraints.py"


def test_conflicting_pins_are_refused(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("-c train.txt\n# a comment\nNumPy==2.4.6\n")
    b.write_text("numpy==1.26.4\n")
    with pytest.raises(ValueError, match="numpy==1.26.4, but a.txt pins 2.4.6"):
        constraints.pins([a, b])
    b.write_text("numpy>=2\n")
    with pytest.raises(ValueError, match="not a name==version pin"):
        constraints.pins([a, b])


def test_every_framework_has_an_extra():
    assert {"gym", "trl", "skyrl", "verifiers", "verl", "openrlhf"} <= set(EXTRAS)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_extra_ranges_hold_the_tested_pins(extra):
    pins = constraints.pins(extra=extra)
    for req in EXTRAS[extra]:
        r = Requirement(req)
        name = constraints.canonical(r.name)
        assert name in pins, f"[{extra}] {req}: no requirements/ file pins {r.name}"
        assert r.specifier.contains(pins[name][1], prereleases=True), (
            f"[{extra}] {req} excludes the tested {r.name}=={pins[name][1]}"
        )
        assert str(r.specifier), f"[{extra}] {req}: no range (a plain install would take any version)"


def test_framework_extras_cap_torch_and_transformers():
    """A plain install of an extra that pulls torch or transformers cannot take a newer minor than the tested one."""
    for extra in ("trl", "verl", "openrlhf"):
        reqs = {constraints.canonical(Requirement(r).name): Requirement(r) for r in EXTRAS[extra]}
        for name, newer in (("torch", "2.15.0"), ("transformers", "5.24.0")):
            assert name in reqs and not reqs[name].specifier.contains(newer), (extra, name)


def test_check_extras_reports_what_differs_from_the_pins():
    """scripts/check_extras.py's comparison, on resolutions made up here: a pinned package off its pin and an extra's
    requirement the resolution left out are reported; the tested set passes."""
    spec = importlib.util.spec_from_file_location("check_extras", ROOT / "scripts" / "check_extras.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    pins = constraints.pins()

    def resolved(**versions):
        return [{"metadata": {"name": n, "version": v}} for n, v in versions.items()]

    reqs = EXTRAS["trl"]
    tested = resolved(trl="1.16.0", transformers="5.17.0", torch="2.11.0", datasets="5.2.0", medgym="0.2.0")
    assert mod.check("trl", reqs, tested, pins) == []
    moved = resolved(trl="1.16.0", transformers="5.24.0", torch="2.15.0", datasets="5.2.0")
    bad = mod.check("trl", reqs, moved, pins)
    assert any("torch resolved to 2.15.0, the tested pin is 2.11.0" in b for b in bad), bad
    assert any("transformers" in b and "5.24.0" in b for b in bad), bad
    assert any("datasets>=4,<6: resolved to None" in b for b in mod.check("trl", reqs, moved[:3], pins))
