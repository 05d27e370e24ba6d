"""verifiers / prime-rl: verifiers' own load_environment("medgym") gives medgym's MultiTurnEnv, and verifiers' own
rollout loop (Environment.evaluate) plays exported rows against a live server, the reference test model answering
through verifiers' OpenAI client; the rubric's reward is the server's."""

from adapters_live import export, fake_model, medgym_server, wait_rows, framework  # noqa: F401

vf = framework("verifiers", "verifiers")


def test_verifiers_rollouts_score_with_medgym_rubric(medgym_server, fake_model, tmp_path, monkeypatch):
    url, store = medgym_server
    monkeypatch.setenv("MEDGYM_TEST_MODEL_KEY", "unused")
    prompts = export(tmp_path) / "prompts" / "medcalcbench_test.jsonl"
    env = vf.load_environment("medgym", base_url=url, prompts=str(prompts), options={"max_turns": 5})
    from medgym.verifiers_env import MedGymEnv

    # verifiers stops once a rollout holds max_turns replies, before env_response sees the last: one more, so the
    # server's turn limit (5) ends the episode
    assert isinstance(env, MedGymEnv) and isinstance(env, vf.MultiTurnEnv) and env.max_turns == 6
    assert env.medgym_options["max_turns"] == 5
    client = vf.ClientConfig(api_base_url=fake_model, api_key_var="MEDGYM_TEST_MODEL_KEY")
    res = env.evaluate_sync(client=client, model="medgym-fake", num_examples=2, rollouts_per_example=1)
    outs = res["outputs"]
    assert len(outs) == 2
    import json

    exported = [json.loads(line) for line in prompts.read_text().splitlines()]
    for out, row in zip(sorted(outs, key=lambda o: o["example_id"]), exported):
        assert out["reward"] == 1.0 and out["metrics"]["medgym_success"] == 1.0, out
        got = [{"role": m["role"], "content": m["content"]} for m in out["prompt"]]
        assert got == row["prompt"], "the rollout's prompt differs from the session's"
        assert out["completion"][0]["role"] == "assistant"


def test_verifiers_last_turn_runs(medgym_server, fake_model, monkeypatch):
    # One turn each: verifiers' own rollout loop sends the model's only reply (the reference solution) to the server,
    # whose episode ends on it. Before, verifiers' limit equalled medgym's and its loop stopped before env_response
    # saw the last reply: the reply never ran and the closed session scored 0.
    url, _ = medgym_server
    monkeypatch.setenv("MEDGYM_TEST_MODEL_KEY", "unused")
    env = vf.load_environment("medgym", base_url=url, num_examples=1, dataset="medcalcbench", split="test",
                              options={"max_turns": 1})
    assert (env.max_turns, env.medgym_options["max_turns"]) == (2, 1)
    client = vf.ClientConfig(api_base_url=fake_model, api_key_var="MEDGYM_TEST_MODEL_KEY")
    out = env.evaluate_sync(client=client, model="medgym-fake", num_examples=1, rollouts_per_example=1)["outputs"][0]
    assert out["reward"] == 1.0 and out["metrics"]["medgym_success"] == 1.0, out


def test_verifiers_unfinished_rollout_is_closed_and_stored(medgym_server, tmp_path, monkeypatch):
    # A rollout that stops before medgym's episode ends (an error, a timeout): the cleanup hook closes the session,
    # so the episode is scored (turn_limit, 0: closed by the client) and stored, not reaped as abandoned, and the
    # rubric's reward is 0. The hooks are called as verifiers' rollout calls them.
    import asyncio

    url, store = medgym_server
    env = vf.load_environment("medgym", base_url=url, num_examples=1, dataset="medcalcbench", split="test",
                              max_turns=3)
    assert (env.max_turns, env.medgym_options["max_turns"]) == (4, 3)  # verifiers' limit given alone is medgym's too
    row = env.get_eval_dataset(n=1)[0]

    async def play():
        state = await env.setup_state({"info": row["info"], "prompt": row["prompt"]})
        sess = state["medgym"]["session"]
        out = await env.env_response([{"role": "assistant", "content": "not an action"}], state)
        assert out and out[0]["role"] == "user" and state.get("final_env_response") is None
        await env.close_medgym_session(state)
        return state, sess

    state, sess = asyncio.run(play())
    assert sess.closed is not None and state["medgym"]["reward"] == 0.0 and state["medgym"]["outcome"] == "turn_limit"
    rows = [r for r in wait_rows(store, sess.created["run_id"], 1) if r["episode_id"] == sess.created["episode_id"]]
    assert len(rows) == 1 and rows[0]["termination"] == "closed"


def test_prime_hub_package(medgym_server, fake_model, monkeypatch):
    # deploy/prime/medgym_env, the package for Prime's Environments Hub: what `prime env push` reads (name, version,
    # description, tags, dependencies; the module its build includes) and, its module importable as an installed
    # package's would be, verifiers' own load_environment("medgym-env") gets the adapter's environment, whose rollout
    # scores the server's reward (the server named by $MEDGYM_URL, as a hub user's would be).
    import tomllib
    from pathlib import Path

    from medgym.verifiers_env import MedGymEnv

    pkg = Path(__file__).resolve().parents[3] / "deploy" / "prime" / "medgym_env"
    project = tomllib.loads((pkg / "pyproject.toml").read_text())
    meta = project["project"]
    assert meta["name"].replace("-", "_") == "medgym_env" and (pkg / "medgym_env.py").is_file()
    assert meta["version"] and meta["description"] and meta["tags"] and (pkg / "README.md").is_file()
    assert project["tool"]["hatch"]["build"]["include"][0] == "medgym_env.py"
    [dep] = meta["dependencies"]
    assert dep.startswith("medgym[verifiers] @ ") and dep.endswith("#subdirectory=clients/python")
    url, _ = medgym_server
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.setenv("MEDGYM_URL", url)
    monkeypatch.setenv("MEDGYM_TEST_MODEL_KEY", "unused")
    env = vf.load_environment("medgym-env", num_examples=1, dataset="medcalcbench", split="test",
                              options={"max_turns": 1})
    assert type(env) is MedGymEnv and env.medgym_url == url
    client = vf.ClientConfig(api_base_url=fake_model, api_key_var="MEDGYM_TEST_MODEL_KEY")
    out = env.evaluate_sync(client=client, model="medgym-fake", num_examples=1, rollouts_per_example=1)["outputs"][0]
    assert out["reward"] == 1.0 and out["metrics"]["medgym_success"] == 1.0, out
