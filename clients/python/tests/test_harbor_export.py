"""The Harbor export against the real `harbor` package (0.25.0, requirements/harbor.txt; it needs Python >= 3.12, so
this runs in the Python 3.13 runtime of scripts/py313.sh, through scripts/test-harbor.sh) on the local Docker engine:

- `medgym export --format harbor` writes a stratified set: the first test task of each dataset of HARBOR_DATASETS;
- `harbor run` with Harbor's oracle agent (the reference solution) scores every task 1.0, each through medgym's
  verifier in a container of its own (the task's tests/ image), with no exception;
- a spy agent (harbor_spy.py) finds no answer key (/tests, /solution, task.json) and no network in the agent's
  container, and its episode scores 0 (it writes no answer);
- parity, as Harbor asks of an adapter: the same tasks played by `medgym run --policy reference` (medgym's own
  pipeline: sandbox-worker, verifier, trajectory store; the sandbox's docker backend on the same image as Harbor's
  agent container) get the same reward, task by task.

Skipped where harbor is not installed (scripts/test-harbor.sh runs it in its venv)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("harbor")

from conftest import ROOT, library, medgym_bin  # noqa: E402

DATASETS = [d for d in os.environ.get("HARBOR_DATASETS", "npowerai,clinical_ml,treqs").split(",") if d]
SPLIT = "test"
# compose: the containers leave the network through a compose file (this engine cannot pull the egress sidecar
# Harbor's Docker environment enforces network_mode "no-network" with).
NETWORK = os.environ.get("HARBOR_NETWORK", "compose")


def images() -> tuple[str, str]:
    agent, verifier = os.environ.get("MEDGYM_HARBOR_IMAGE"), os.environ.get("MEDGYM_HARBOR_VERIFIER_IMAGE")
    if not agent or not verifier:
        pytest.fail("MEDGYM_HARBOR_IMAGE and MEDGYM_HARBOR_VERIFIER_IMAGE are unset (scripts/harbor-images.sh)")
    return agent, verifier


def run(args: list[str], timeout: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, f"{args[:2]} failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stratified set as Harbor task folders: {out}/<task id>/."""
    agent, verifier = images()
    out = tmp_path_factory.mktemp("harbor") / "tasks"
    for ds in DATASETS:
        run([str(medgym_bin()), "export", "--format", "harbor", "--library", str(library()),
             "--dataset", ds, "--split", SPLIT, "--limit", "1", "--harbor-network", NETWORK,
             "--image", agent, "--verifier-image", verifier, "--out", str(out)], 120)  # fmt: skip
    assert len(list(out.iterdir())) == len(DATASETS)
    return out


def harbor_run(tasks: Path, jobs: Path, name: str, *agent: str) -> dict[str, dict]:
    """`harbor run` over every task folder: each trial's result.json by task id."""
    harbor = Path(sys.executable).parent / "harbor"
    run([str(harbor), "run", "--path", str(tasks), *agent, "--env", "docker", "--jobs-dir", str(jobs),
         "--job-name", name, "--n-concurrent", "2", "--yes", "--quiet"], 1800)  # fmt: skip
    trials = {}
    for r in (jobs / name).glob("*/result.json"):
        res = json.loads(r.read_text())
        trials[res["task_name"].removeprefix("medgym/")] = res | {"dir": r.parent}
    return trials


@pytest.fixture(scope="module")
def oracle(exported: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return harbor_run(exported, tmp_path_factory.mktemp("jobs"), "oracle", "--agent", "oracle")


def test_oracle_scores_one_on_every_task(exported: Path, oracle: dict[str, dict]):
    """Harbor's oracle (solution/solve.sh) earns 1.0 from medgym's verifier on every exported task."""
    assert set(oracle) == {p.name for p in exported.iterdir()}
    for task, res in oracle.items():
        assert res["exception_info"] is None, (task, res["exception_info"])
        assert res["verifier_environment_mode"] == "separate", task
        assert res["verifier_result"]["rewards"] == {"reward": 1}, (task, res["verifier_result"])
        detail = json.loads((res["dir"] / "verifier" / "medgym.json").read_text())
        assert detail["outcome"] == "correct" and detail["task_id"] == task, detail


def test_spy_agent_finds_no_answer_key_and_no_network(exported: Path, tmp_path_factory: pytest.TempPathFactory):
    """An agent that looks for the answer key and the network in its container finds neither, and scores 0."""
    one = tmp_path_factory.mktemp("spy") / "tasks"
    one.mkdir()
    first = sorted(exported.iterdir())[0]
    os.symlink(first, one / first.name)
    tests = Path(__file__).resolve().parent
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{tests}:{env_path}" if env_path else str(tests)
    try:
        trials = harbor_run(one, tmp_path_factory.mktemp("jobs"), "spy", "--agent-import-path", "harbor_spy:SpyAgent")
    finally:
        os.environ["PYTHONPATH"] = env_path
    res = trials[first.name]
    assert res["exception_info"] is None, res["exception_info"]
    report = json.loads((res["dir"] / "artifacts" / "work" / "spy.json").read_text())
    assert report["answer_key_files"] == [], report
    assert not report["tests_dir"] and not report["solution_dir"], report
    assert report["network"].startswith("unreachable"), report
    assert report["data"], report  # positive control: the task's data is there
    assert res["verifier_result"]["rewards"] == {"reward": 0}, res["verifier_result"]


def test_parity_with_medgym_run(exported: Path, oracle: dict[str, dict], tmp_path_factory: pytest.TempPathFactory):
    """The same tasks played by medgym's own pipeline (the reference policy) get the rewards Harbor's oracle got."""
    agent, _ = images()
    tmp = tmp_path_factory.mktemp("parity")
    ids = sorted(p.name for p in exported.iterdir())
    run([str(medgym_bin()), "run", "--policy", "reference", "--dataset", ",".join(DATASETS), "--split", SPLIT,
         "--task", ",".join(ids), "--library", str(library()), "--store", str(tmp / "store"),
         "--state", str(tmp / "state"), "--run-id", "harbor-parity",
         "--sandbox-backend", "docker", "--sandbox-docker-image", agent], 900)  # fmt: skip
    out = run([str(medgym_bin()), "query", "--store", str(tmp / "store"), "--format", "csv",
               "SELECT task_id, reward, outcome FROM trajectories WHERE run_id = 'harbor-parity'"], 120)  # fmt: skip
    rows = {r["task_id"]: r for r in csv.DictReader(io.StringIO(out.stdout))}
    assert sorted(rows) == ids, out.stdout
    for task in ids:
        harbor_reward = oracle[task]["verifier_result"]["rewards"]["reward"]
        assert float(rows[task]["reward"]) == float(harbor_reward), (task, rows[task], harbor_reward)
        assert rows[task]["outcome"] == "correct", rows[task]
