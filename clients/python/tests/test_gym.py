"""medgym.gym.MedGymEnv: registered on import of medgym.gym, gymnasium's env checker, an episode played through gymnasium.make."""

from __future__ import annotations

import json

import warnings

import gymnasium
from conftest import DATASET, SPLIT, prompt_of, reference_action, run_id
from gymnasium.utils.env_checker import check_env

from medgym.gym import MedGymEnv  # registers medgym/MedGym-v0


def test_registered_on_import():
    assert "medgym/MedGym-v0" in gymnasium.registry
    assert gymnasium.spec("medgym/MedGym-v0").entry_point == "medgym.gym:MedGymEnv"
    # `import medgym` alone registers nothing (no import-time side effects); an id naming the module imports it
    import subprocess
    import sys

    code = ("import gymnasium, medgym; assert 'medgym/MedGym-v0' not in gymnasium.registry; "
            "env = gymnasium.make('medgym.gym:medgym/MedGym-v0', base_url='http://127.0.0.1:1', task_ids=['t']); "
            "assert type(env.unwrapped).__name__ == 'MedGymEnv'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_check_env(server, reference):
    """gymnasium's checker: spaces, reset/step signatures and types, seeding determinism (the same seed picks the same
    task and gives the same prompt), observations in the observation space."""
    client = server.client()  # its responses checked (conftest)
    env = MedGymEnv(task_ids=[r["task_id"] for r in reference], options={"run_id": run_id("check")}, client=client)
    try:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            check_env(env, skip_render_check=True)
        assert not [str(w.message) for w in record], "the env checker warned"
    finally:
        env.close()
        client.close()


def test_episode_through_gymnasium_make(server, reference):
    row = reference[1]
    rid = run_id("gym")
    client = server.client()  # base_url's client, its responses checked (conftest)
    env = gymnasium.make("medgym/MedGym-v0", base_url=server.url, dataset=DATASET, split=SPLIT, options={"run_id": rid}, client=client)
    obs, info = env.reset(seed=0, options={"task_id": row["task_id"]})
    assert info["messages"] == prompt_of(row)
    assert obs == prompt_of(row)[-1]["content"]
    assert env.observation_space.contains(obs)
    action = json.dumps(reference_action(row))
    assert env.action_space.contains(action)
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["outcome"]) == (1.0, True, False, "correct")
    env.close()
    client.close()
    rows = server.rows(rid)
    assert len(rows) == 1 and rows[0]["reward"] == 1.0 and rows[0]["task_id"] == row["task_id"]


def test_unfinished_episode_is_stored_on_close(server, reference):
    rid = run_id("gymclose")
    client = server.client()
    env = gymnasium.make("medgym/MedGym-v0", base_url=server.url, task_ids=[reference[0]["task_id"]], options={"run_id": rid}, client=client)
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step("not an action")
    assert not terminated and info["parse_error"] and reward == 0.0
    env.close()  # ends the session on the server: scored and stored (closed: turn_limit, reward 0), not abandoned
    client.close()
    rows = server.rows(rid)
    assert len(rows) == 1 and rows[0]["num_turns"] == 1
    assert (rows[0]["outcome"], rows[0]["termination"], rows[0]["reward"]) == ("turn_limit", "closed", 0.0)
