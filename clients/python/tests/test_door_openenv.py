"""The OpenEnv door (/openenv) against OpenEnv's own package (openenv 0.10.0, requirements/env-openenv.txt): its
runtime validator passes, its GenericEnvClient plays a whole episode with the reference replies and gets the
verifier's reward, stored as one row; an episode that never computes the answer sees no gold answer in any message;
a client that lost its socket resumes its session with its id. Skipped where openenv is not installed (run by
scripts/test-doors.sh in its venv)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

pytest.importorskip("openenv")

import websockets  # noqa: E402  (openenv's own dependency)
from openenv import GenericEnvClient  # noqa: E402
from openenv.cli._validation import validate_running_environment  # noqa: E402

from conftest import DATASET, SPLIT, run_id  # noqa: E402
from doors import assert_no_gold, door_server, one_row, reference_default, replies, wrong_replies  # noqa: E402,F401


def base(server) -> str:
    return server.url + "/openenv"


def test_openenv_validator_passes(door_server):
    """`openenv validate --url` (the package's runtime check of a running server) passes against /openenv."""
    report = validate_running_environment(base(door_server))
    failed = [c for c in report["criteria"] if not c["passed"]]
    assert report["passed"], failed
    assert report["mode"] == "simulation" and report["standard_profile"] == "openenv-http/1.x"


def test_openenv_client_plays_the_reference_episode(door_server, reference_default):
    """OpenEnv's GenericEnvClient, unchanged: reset, the reference replies as steps, state; the reward at done is
    the verifier's (1.0), 0 before it; the episode is one stored row; a step after the end is refused."""
    row, rid = reference_default, run_id("openenv")
    with GenericEnvClient(base_url=base(door_server)).sync() as env:
        r = env.reset(task_id=row["task_id"], dataset=DATASET, split=SPLIT, options={"run_id": rid})
        assert not r.done and r.reward is None
        obs = r.observation
        assert obs["turn"] == 0 and obs["messages"][-1]["role"] == "user"
        prompt = httpx.get(f"{door_server.url}/v1/tasks/{row['task_id']}/prompt", params={"dataset": DATASET}).json()
        assert obs["tools"] == prompt["tools"] and obs["messages"] == prompt["messages"]  # the session's prompt
        rewards = []
        for reply in replies(row):
            r = env.step({"content": reply})
            rewards.append(r.reward)
        assert r.done and rewards == [0, 1.0]
        assert r.observation["info"]["outcome"] == "correct"
        st = env.state()
        assert st["done"] and st["outcome"] == "correct" and st["reward"] == 1.0 and st["step_count"] == 2
        with pytest.raises(RuntimeError, match="session is done"):
            env.step({"content": replies(row)[-1]})
    stored = one_row(door_server, rid)
    assert stored["reward"] == 1.0 and stored["outcome"] == "correct" and stored["episode_id"] == st["episode_id"]


def test_openenv_no_gold_in_any_message(door_server, reference_default):
    """Under the default rule, an episode that never computed the answer reads no gold answer in any observation
    or state, done included; its wrong answer scores 0 and is stored once."""
    task, rid = reference_default["task_id"], run_id("openenv-wrong")
    seen: list[Any] = []
    with GenericEnvClient(base_url=base(door_server)).sync() as env:
        r = env.reset(task_id=task, dataset=DATASET, split=SPLIT, options={"run_id": rid})
        seen.append(r.observation)
        for reply in wrong_replies(task):
            r = env.step({"content": reply})
            seen += [r.observation, r.reward, r.metadata]
        seen.append(env.state())
        seen.append(env.step({"content": "x", "turn": 0}).observation)  # a retried turn: its stored answer
    assert r.done and r.reward == 0
    assert_no_gold(task, seen)
    assert one_row(door_server, rid)["reward"] == 0


def test_openenv_resume_after_a_lost_socket(door_server, reference_default):
    """A client whose socket drops (no close message) reconnects with its session id and continues at its turn;
    the episode is still one row with the verifier's reward."""
    row, rid = reference_default, run_id("openenv-resume")
    first, second = replies(row)
    ws_url = "ws" + base(door_server).removeprefix("http") + "/ws"

    async def lose_socket() -> str:
        async with websockets.connect(ws_url) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"task_id": row["task_id"], "options": {"run_id": rid}}}))
            sid = json.loads(await ws.recv())["data"]["observation"]["session_id"]
            await ws.send(json.dumps({"type": "step", "data": {"content": first}}))
            assert json.loads(await ws.recv())["type"] == "observation"
            return sid  # the socket closes without OpenEnv's close message: a lost connection

    sid = asyncio.run(lose_socket())
    with GenericEnvClient(base_url=base(door_server)).sync() as env:
        r = env.reset(session_id=sid)
        assert r.observation["turn"] == 1 and not r.done
        r = env.step({"content": second})
        assert r.done and r.reward == 1.0
    assert one_row(door_server, rid)["reward"] == 1.0


def test_trl_grpo_through_the_openenv_door(server, reference, tmp_path):
    """TRL's GRPOTrainer with an OpenEnv environment as TRL's OpenEnv guide plugs one in (environment_factory: a
    class whose reset and tools call OpenEnv's client), medgym.trl.MedGymOpenEnvToolEnv over /openenv: the same run
    and checks as test_trl_e2e's (every rollout one stored row, the rewards TRL logged are the stored ones, the
    weights changed), every session opened and stepped through OpenEnv's GenericEnvClient."""
    pytest.importorskip("trl")
    from test_trl_e2e import grpo_through_medgym

    from medgym.trl import MedGymOpenEnvToolEnv

    # the factory of the class with the server's tools (what MedGymOpenEnvToolEnv.factory(url, dataset=...) makes)
    grpo_through_medgym(server, reference, tmp_path, MedGymOpenEnvToolEnv,
                        lambda env, rid: env.factory(server.url, options={"run_id": rid, "max_turns": 3}))
