"""medgym's NeMo Gym resources server (medgym.nemo_gym) with the real `nemo-gym` package's classes (0.4.0,
requirements/nemo-gym.txt; it needs Python >= 3.12, so this runs in the Python 3.13 runtime of scripts/py313.sh,
through scripts/test-harbor.sh) against a real `medgym env serve`: the server is built as NeMo Gym builds it
(config, ServerClient, setup_webserver, its session middleware), dataset rows validate as NeMo Gym's
responses_create_params, the reference played through the tool endpoints verifies to 1.0, a wrong answer and an
unfinished episode to 0, and each session is one stored episode; and NeMo Gym's own simple_agent, over real HTTP with
its ServerClient, plays a whole rollout against it with a fake model (the only fake: the hosted LLM) replying as the
reference policy: reward 1.0. Skipped where nemo_gym is not installed."""

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

from fastapi import FastAPI, Request  # noqa: E402
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


def fake_model_app(code: str) -> Any:
    """The only fake: a hosted model's /v1/responses (NeMo Gym's model server API) that replies as the reference
    policy does. First a validate_code call with the reference solution, then an answer call with the last line the
    run printed (read from the tool output the agent fed back), then a closing message."""
    app = FastAPI()

    @app.post("/v1/responses")
    async def responses(request: Request) -> dict[str, Any]:
        body = await request.json()
        outputs = [i for i in body["input"] if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            out = [{"type": "function_call", "id": "fc_0", "call_id": "call_0", "name": "validate_code",
                    "arguments": json.dumps({"code": code}), "status": "completed"}]  # fmt: skip
        elif len(outputs) == 1:
            observation = json.loads(outputs[0]["output"])["observation"]
            last = [ln.strip() for ln in observation.strip().splitlines() if ln.strip()][-1]
            out = [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "answer",
                    "arguments": json.dumps({"answer": last}), "status": "completed"}]  # fmt: skip
        else:
            out = [{"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}]  # fmt: skip
        return {"id": f"resp_{len(outputs)}", "created_at": 0, "model": "policy", "object": "response", "output": out,
                "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}  # fmt: skip

    return app


def test_simple_agent_plays_the_reference(env_server, rows, reference):
    """NeMo Gym's own simple_agent, its ServerClient and its aiohttp client, over real HTTP between three servers (the
    agent, medgym's resources server, a fake model replying as the reference policy): /run seeds the session, posts
    each function call's arguments to /<tool name>, and /verify returns the verifier's 1.0."""
    import uvicorn
    from nemo_gym.config_types import BaseServerConfig, ModelServerRef, ResourcesServerRef
    from nemo_gym.server_utils import GlobalAIOHTTPAsyncClientConfig, get_global_aiohttp_client, set_global_aiohttp_client
    from omegaconf import OmegaConf
    from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentConfig

    from conftest import free_port

    ports = {name: free_port() for name in ("agent", "medgym", "model")}
    host = "127.0.0.1"
    global_config = OmegaConf.create({
        "medgym": {"resources_servers": {"medgym": {"host": host, "port": ports["medgym"]}}},
        "policy_model": {"responses_api_models": {"fake": {"host": host, "port": ports["model"]}}},
        "medgym_agent": {"responses_api_agents": {"simple_agent": {"host": host, "port": ports["agent"]}}},
    })  # fmt: skip
    client = ServerClient(head_server_config=BaseServerConfig(host=host, port=free_port()), global_config_dict=global_config)
    resources = MedgymResourcesServer(
        config=MedgymResourcesServerConfig(host=host, port=ports["medgym"], entrypoint="", name="medgym",
                                           medgym_url=env_server.url, options={"end_on": "answer", "run_id": "nemo-agent"}),
        server_client=client,
    )  # fmt: skip
    agent = SimpleAgent(
        config=SimpleAgentConfig(host=host, port=ports["agent"], entrypoint="", name="medgym_agent",
                                 resources_server=ResourcesServerRef(type="resources_servers", name="medgym"),
                                 model_server=ModelServerRef(type="responses_api_models", name="policy_model"),
                                 max_steps=5),
        server_client=client,
    )  # fmt: skip
    row = next(r for r in rows if r["task_id"] == reference["task_id"])
    apps = {"agent": agent.setup_webserver(), "medgym": resources.setup_webserver(), "model": fake_model_app(reference["code"])}

    async def main() -> dict[str, Any]:
        set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())
        servers = [uvicorn.Server(uvicorn.Config(app, host=host, port=ports[name], log_level="warning"))
                   for name, app in apps.items()]  # fmt: skip
        tasks = [asyncio.create_task(s.serve()) for s in servers]
        try:
            while not all(s.started for s in servers):
                await asyncio.sleep(0.05)
            resp = await client.post(server_name="medgym_agent", url_path="/run", json=row)
            assert resp.status == 200, await resp.text()
            return json.loads(await resp.read())
        finally:
            for s in servers:
                s.should_exit = True
            await asyncio.gather(*tasks)
            await get_global_aiohttp_client().close()

    result = asyncio.run(main())
    assert result["reward"] == 1.0 and result["outcome"] == "correct", result
    calls = [o["name"] for o in result["response"]["output"] if o["type"] == "function_call"]
    assert calls == ["validate_code", "answer"], result["response"]["output"]
