"""verifiers 0.4 (the v1 stack) / prime-rl: `vf-eval medgym-verifiers`, verifiers' own eval command, loads medgym's
taskset package by its id and plays its tasks through a live server, the model's calls going through verifiers' own
chat harness (`null`, in its local subprocess runtime) and its interception server to the reference test model; each
rollout is one stored episode whose reward the trace carries. The package for Prime Intellect's Environments Hub
(deploy/prime/medgym_env, id `medgym-env`) is loaded and played the same way."""

import json
import os
import subprocess
import sys
from pathlib import Path

from adapters_live import fake_model, medgym_server, streaming_model, wait_rows, framework  # noqa: F401
from conftest import ROOT

framework("verifiers", "verifiers.v1")


PRIME_PACKAGE = ROOT / "deploy" / "prime" / "medgym_env"


def vf_eval(tmp_path: Path, url: str, model_url: str, *args: str, taskset: str = "medgym-verifiers", n: int = 2,
            path: tuple[Path, ...] = ()) -> list[dict]:
    """The traces of `vf-eval <taskset>` over the first n test tasks: one per rollout (`path`: more import roots,
    where a package not installed in the venv is found, as an installed one would be)."""
    out = tmp_path / "vf-eval"
    bindir = Path(sys.executable).parent  # the venv's: vf-eval, and uv for the chat harness's program
    roots = [*map(str, path), str(ROOT / "clients" / "python"), os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "MEDGYM_TEST_MODEL_KEY": "unused",
           "PYTHONPATH": os.pathsep.join(filter(None, roots))}
    cmd = [str(bindir / "vf-eval"), taskset, "-n", str(n), "-m", "medgym-fake", "--client.base-url", model_url,
           "--client.api-key-var", "MEDGYM_TEST_MODEL_KEY", "--no-push", "--no-rich", "-o", str(out),
           "--env.taskset.base-url", url, "--env.taskset.dataset", "medcalcbench", "--env.taskset.split", "test",
           "--env.taskset.options", '{"max_turns": 5}', *args]
    res = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    episodes = [json.loads(line) for f in out.glob("**/traces.jsonl") for line in f.read_text().splitlines()]
    assert len(episodes) == n, episodes
    traces = [t for e in episodes for t in e["traces"]]
    assert len(traces) == n
    return traces


def stored(store, trace: dict) -> dict:
    """The episode the trace's session stored: exactly one row."""
    med = trace["info"]["medgym"]
    rows = [r for r in wait_rows(store, med["run_id"], 1) if r["episode_id"] == med["episode_id"]]
    assert len(rows) == 1, rows
    return rows[0]


def test_vf_eval_rollouts_are_stored_episodes_with_the_verifiers_reward(medgym_server, streaming_model, tmp_path):
    url, store = medgym_server
    for trace in vf_eval(tmp_path, url, streaming_model):
        row = stored(store, trace)
        assert trace["rewards"]["medgym_reward"]["score"] == row["reward"] == 1.0, trace.get("errors")
        assert trace["metrics"]["medgym_success"] == 1.0 and row["outcome"] == "correct"
        assert row["task_id"] == trace["task"]["data"]["id"] and row["termination"] != "abandoned"
        # the model saw the session's prompt, and its replies are the stored turns, in order (two: the first is no
        # action, so the observation went back through the harness as the next user turn)
        msgs = [n["message"] for n in trace["nodes"]]
        assert [(m["role"], m["content"]) for m in msgs[:2]] == [(m["role"], m["content"]) for m in row["messages"][:2]]
        replies = [n["message"]["content"] for n in trace["nodes"] if n["sampled"]]
        assert replies == [m["content"] for m in row["messages"] if m["role"] == "assistant"] and len(replies) == 2


def test_vf_eval_cut_rollout_is_closed_scored_and_stored(medgym_server, streaming_model, tmp_path):
    # verifiers' own turn limit (--env.agent.max-turns 1) ends each rollout after its first reply, no action, before
    # medgym's episode is done: the env closes the session, so the episode is scored (turn_limit, 0) and stored, not
    # reaped as abandoned, and the trace's reward is that score.
    url, store = medgym_server
    for trace in vf_eval(tmp_path, url, streaming_model, "--env.agent.max-turns", "1"):
        row = stored(store, trace)
        assert trace["rewards"]["medgym_reward"]["score"] == row["reward"] == 0.0
        assert (row["outcome"], row["termination"]) == ("turn_limit", "closed") and len(row["turns"]) == 1
    # Token data: verifiers' eval client relays text, so these traces carry no ids and the steps sent none. Under its
    # train client each node carries its delta of the token sequence (the sampled node: the generation prompt's
    # scaffold, then the completion, masked trainable, with logprobs): turn_tokens reads them back as the step sends
    # them. The same trace, as verifiers' own Trace model, with the ids a train client would have filled in.
    import verifiers.v1 as vf

    from medgym_verifiers import turn_tokens

    nodes, ids = [dict(n) for n in trace["nodes"]], iter(range(1000))
    assert turn_tokens(vf.Trace.model_validate(trace)) == {} and [n["sampled"] for n in nodes][-1]
    for n in nodes:
        n["token_ids"] = [next(ids) for _ in range(4)]
        n["mask"] = [False, True, True, True] if n["sampled"] else [False] * 4
        n["logprobs"] = [0.0, -0.5, -0.25, -0.125] if n["sampled"] else []
    got = turn_tokens(vf.Trace.model_validate({**trace, "nodes": nodes}))
    path = [nodes[-1]]
    while path[0].get("parent") is not None:
        path.insert(0, nodes[path[0]["parent"]])
    assert got == {"prompt_token_ids": [t for n in path[:-1] for t in n["token_ids"]] + nodes[-1]["token_ids"][:1],
                   "token_ids": nodes[-1]["token_ids"][1:], "logprobs": [-0.5, -0.25, -0.125]}


def test_prime_hub_package_loads_by_its_id_and_plays_a_stored_episode(medgym_server, streaming_model, tmp_path):
    # deploy/prime/medgym_env, the package for Prime's Environments Hub, in vf-init's layout: what `prime env push`
    # reads (name, version, description, tags, dependencies; the package its wheel holds), then verifiers' own loader
    # and `vf-eval` of its hub id play one rollout on the live server: the trace's reward is the stored episode's.
    import tomllib

    import verifiers.v1 as vf
    from medgym_verifiers import MedGymEnv, MedGymTasksetConfig

    project = tomllib.loads((PRIME_PACKAGE / "pyproject.toml").read_text())
    meta = project["project"]
    assert meta["name"] == "medgym-env" and meta["version"] and meta["description"] and meta["tags"]
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["medgym_env"]
    assert (PRIME_PACKAGE / "medgym_env" / "__init__.py").is_file() and (PRIME_PACKAGE / "README.md").is_file()
    # verifiers at the adapter's tested range (the client's `verifiers` extra), required unconditionally: the hub
    # lists the package as verifiers v1 by that floor and ignores a requirement only an extra pulls in. And the client
    # with the extra, from the repository.
    client = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    [verifiers_range] = client["optional-dependencies"]["verifiers"]
    verifiers, medgym = meta["dependencies"]
    assert verifiers == verifiers_range and verifiers.startswith("verifiers>=0.4")
    assert medgym.startswith("medgym[verifiers] @ ") and medgym.endswith("#subdirectory=clients/python")
    # verifiers' loader: the id, bare or as the hub names it (owner/name@version), is the adapter's env and taskset.
    sys.path.insert(0, str(PRIME_PACKAGE))
    try:
        for ident in ("medgym-env", f"medgym/medgym-env@{meta['version']}"):
            assert vf.environment_class(ident) is MedGymEnv and vf.taskset_config_type(ident) is MedGymTasksetConfig
    finally:
        sys.path.remove(str(PRIME_PACKAGE))
    url, store = medgym_server
    [trace] = vf_eval(tmp_path, url, streaming_model, taskset=f"medgym/medgym-env@{meta['version']}", n=1,
                      path=(PRIME_PACKAGE,))
    row = stored(store, trace)
    assert trace["rewards"]["medgym_reward"]["score"] == row["reward"] == 1.0, trace.get("errors")
    assert trace["metrics"]["medgym_success"] == 1.0 and row["outcome"] == "correct"
    assert row["task_id"] == trace["task"]["data"]["id"] and row["termination"] != "abandoned"

