"""medgym's NeMo Gym resources server (medgym.nemo_gym) with the real `nemo-gym` package's classes (0.4.0,
requirements/nemo-gym.txt; it needs Python >= 3.12, so this runs in the Python 3.13 runtime of scripts/py313.sh,
through scripts/test-harbor.sh) against a real `medgym env serve`: the server is built as NeMo Gym builds it
(config, ServerClient, setup_webserver, its session middleware), dataset rows validate as NeMo Gym's
responses_create_params, the reference played through the tool endpoints verifies to 1.0, a wrong answer and an
unfinished episode to 0, and each session is one stored episode. Skipped where nemo_gym is not installed."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import subprocess
from typing import Any
from unittest.mock import MagicMock

import pytest

pytest.importorskip("nemo_gym")

from fastapi.testclient import TestClient  # noqa: E402
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming  # noqa: E402
from nemo_gym.server_utils import ServerClient  # noqa: E402

import medgym  # noqa: E402
from conftest import DATASET, SPLIT, library, medgym_bin, start_server  # noqa: E402
from medgym.nemo_gym import MedgymResourcesServer, MedgymResourcesServerConfig, dataset_rows  # noqa: E402


@pytest.fixture(scope="module")
def env_server(tmp_path_factory: pytest.TempPathFactory):
    # The sandbox's docker backend: this runs inside a bubblewrap runtime, where the default backend's own
    # bubblewrap would nest.
    image = os.environ.get("MEDGYM_HARBOR_IMAGE", "medgym/sandbox:latest")
    s = start_server(tmp_path_factory.mktemp("nemo"), "--sandbox-backend", "docker", "--sandbox-docker-image", image,
                     checked=False)  # fmt: skip
    yield s
    s.stop()


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """The first TREQS train task of the library's verifier tree: its id and reference solution."""
    line = (library() / "verifier" / DATASET / f"{SPLIT}.jsonl").read_text().splitlines()[0]
    t = json.loads(line)
    return {"task_id": t["view"]["id"], "code": t["reference"]}


def nemo_server(env_server, run: str) -> TestClient:
    config = MedgymResourcesServerConfig(
        host="127.0.0.1", port=0, entrypoint="", name="medgym",
        medgym_url=env_server.url, options={"end_on": "answer", "run_id": run},
    )  # fmt: skip
    server = MedgymResourcesServer(config=config, server_client=MagicMock(spec=ServerClient))
    # Used as a context manager: one event loop for the app's life, as uvicorn runs it (the server's medgym client
    # lives on that loop).
    return TestClient(server.setup_webserver())


def empty_response() -> dict[str, Any]:
    return NeMoGymResponse.model_validate(
        {"id": "resp_1", "created_at": 0, "model": "policy", "object": "response", "output": [],
         "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}  # fmt: skip
    ).model_dump()


def verify(c: TestClient, row: dict[str, Any]) -> dict[str, Any]:
    r = c.post("/verify", json={"responses_create_params": row["responses_create_params"], "response": empty_response()})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def rows(env_server) -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        async with medgym.AsyncClient(env_server.url) as c:
            return await dataset_rows(c, DATASET, SPLIT, limit=2)

    return asyncio.run(main())


def test_dataset_rows_are_nemo_gym_rows(rows):
    """Each row's responses_create_params is NeMo Gym's model: the session's prompt, the actions as function tools."""
    for row in rows:
        p = NeMoGymResponseCreateParamsNonStreaming.model_validate(row["responses_create_params"])
        names = {t["name"] for t in p.tools}
        assert {"validate_code", "answer"} <= names, names
        assert row["dataset"] == DATASET and row["task_id"]


def test_reference_through_the_tools_verifies_to_one(env_server, rows, reference):
    """seed_session, the reference's validate_code, its printed answer, verify: reward 1.0 and one stored row."""
    row = next(r for r in rows if r["task_id"] == reference["task_id"])
    with nemo_server(env_server, "nemo-reference") as c:
        seeded = c.post("/seed_session", json=row)
        assert seeded.status_code == 200, seeded.text
        c.cookies = seeded.cookies
        out = c.post("/validate_code", json={"code": reference["code"]}).json()
        assert not out["done"], out
        last = [ln.strip() for ln in out["observation"].strip().splitlines() if ln.strip()][-1]
        out = c.post("/answer", json={"answer": last}).json()
        assert out["done"], out
        v = verify(c, row)
    assert v["reward"] == 1.0 and v["outcome"] == "correct", v
    q = subprocess.run([str(medgym_bin()), "query", "--store", str(env_server.store), "--format", "csv",
                        "SELECT task_id, reward FROM trajectories WHERE run_id = 'nemo-reference'"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert q.returncode == 0, q.stderr
    stored = [(r["task_id"], float(r["reward"])) for r in csv.DictReader(io.StringIO(q.stdout))]
    assert stored == [(reference["task_id"], 1.0)], q.stdout


def test_wrong_and_unfinished_verify_to_zero(env_server, rows):
    """A wrong answer verifies to 0; so does a session verified before it ended (closed, truncated)."""
    row = rows[0]
    with nemo_server(env_server, "nemo-wrong") as c:
        c.cookies = c.post("/seed_session", json=row).cookies
        out = c.post("/answer", json={"answer": "not the answer"}).json()
        assert out["done"], out
        assert verify(c, row)["reward"] == 0.0

    with nemo_server(env_server, "nemo-unfinished") as c:
        c.cookies = c.post("/seed_session", json=row).cookies
        v = verify(c, row)
        assert v["reward"] == 0.0 and v["outcome"] == "turn_limit", v
        # A tool call after verify has no session to play in.
        assert c.post("/answer", json={"answer": "x"}).json()["done"]


def test_no_gold_in_tool_outputs(env_server, rows):
    """No tool output of a wrong episode holds the task's gold answer (the verifier tree's)."""
    gold = None
    for line in (library() / "verifier" / DATASET / f"{SPLIT}.jsonl").read_text().splitlines():
        t = json.loads(line)
        if t["view"]["id"] == rows[0]["task_id"]:
            gold = t["truth"]["answer"]
    assert gold
    with nemo_server(env_server, "nemo-gold") as c:
        c.cookies = c.post("/seed_session", json=rows[0]).cookies
        outs = [c.post("/validate_code", json={"code": "x = 0"}).json(), c.post("/answer", json={"answer": "0"}).json()]
    assert outs[0]["observation"] and outs[1]["done"], outs  # the code run's output message; the answer ends it
    for o in outs:
        assert gold not in o["observation"], o
