"""SkyRL-gym: medgym.skyrl.MedGymTextEnv made by the real skyrl_gym registry from the rows of `medgym export`'s
prompt-only dataset, played against a live server by the reference test model."""

import pyarrow.parquet as pq

from adapters_live import export, fake_model, medgym_server, model_reply, no_gold, wait_rows, framework  # noqa: F401

skyrl_gym = framework("skyrl", "skyrl_gym")
from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402

import medgym.skyrl  # noqa: E402,F401  (registers env_class "medgym")


def _extras(row: dict, **more) -> dict:
    # What SkyRL's PromptDataset hands the generator: every column but prompt and env_class.
    return {**{k: v for k, v in row.items() if k not in ("prompt", "env_class")}, **more}


def test_skyrl_plays_exported_rows(medgym_server, fake_model, tmp_path):
    url, store = medgym_server
    rows = pq.read_table(export(tmp_path) / "prompts" / "medcalcbench_test.parquet").to_pylist()
    assert [r["env_class"] for r in rows] == ["medgym", "medgym"]
    for row in rows:
        env = skyrl_gym.make(row["env_class"], env_config={"base_url": url}, extras=_extras(row, max_turns=5))
        assert isinstance(env, BaseTextEnv) and env.max_turns == 5
        chat, meta = env.init(row["prompt"])
        assert chat == row["prompt"], "the session's prompt differs from the exported one"
        rewards, out = [], {"done": False}
        while not out["done"]:
            reply = model_reply(fake_model, chat)
            out = env.step(reply)
            no_gold(out)
            rewards.append(out["reward"])
            chat = chat + [{"role": "assistant", "content": reply}] + out["observations"]
        env.close()
        assert out["metadata"]["outcome"] == "correct" and rewards[-1] == 1.0 and sum(rewards[:-1]) == 0
        assert env.get_metrics()["success"] == 1.0
        stored = [r for r in wait_rows(store, meta["run_id"], 1) if r["episode_id"] == meta["episode_id"]]
        assert len(stored) == 1 and stored[0]["task_id"] == row["task_id"] and stored[0]["reward"] == rewards[-1]


def test_skyrl_turn_limit_and_unparseable_replies(medgym_server):
    # The control: replies that are no action score 0 and end at the turn limit SkyRL gave the session.
    url, store = medgym_server
    env = skyrl_gym.make("medgym", env_config={"base_url": url}, extras={"task_id": "medcalcbench-1", "max_turns": 2})
    chat, meta = env.init([])
    outs = [env.step("I would rather not write code."), None]
    assert not outs[0]["done"] and outs[0]["reward"] == 0 and outs[0]["metadata"].get("parse_error")
    assert outs[0]["observations"] and outs[0]["observations"][0]["role"] == "user"
    outs[1] = env.step("still no action")
    assert outs[1]["done"] and outs[1]["reward"] == 0 and outs[1]["observations"] == []
    env.close()
    stored = [r for r in wait_rows(store, meta["run_id"], 1) if r["episode_id"] == meta["episode_id"]]
    assert len(stored) == 1 and stored[0]["outcome"] != "correct"
