"""verifiers (0.4, the v1 stack) / prime-rl adapter: medgym's tasks as a verifiers taskset, played through medgym's
environment API.

verifiers 0.4 finds an environment as an installed package named by its taskset id, exporting its ``Taskset`` (and,
when the taskset needs its own control flow, its ``Env``) through ``__all__``: this package, taskset id
``medgym-verifiers``, exports :class:`MedGymTaskset` (one task per medgym task, listed by the server) and
:class:`MedGymEnv`, whose ``run`` plays one task as one medgym session::

    vf-eval medgym-verifiers -n 20 -m Qwen/Qwen2.5-7B-Instruct --client.base-url http://127.0.0.1:8000/v1 \\
      --env.taskset.base-url http://127.0.0.1:8700 --env.taskset.dataset medcalcbench --env.taskset.split test \\
      --env.taskset.options '{"max_turns": 10}'

The episode: :class:`MedGymEnv` opens a session for the task and opens the agent's interaction on a task minted with
the session's prompt (its system message as the system prompt, its user message as the prompt: the prompt medgym's
llm-worker builds), so the model's first reply answers exactly that prompt. Each reply is sent to the server raw (the
server parses it with medgym's parser and runs code in medgym's sandbox) and the observation is the next user turn,
until the server says done. The verifier's reward is the trace's reward (``medgym_reward``, weight 1), with success as
a metric (``medgym_success``); the trace's ``info["medgym"]`` names the session and the stored episode. An episode that
stops before done (the agent's ``max_turns``, an error, a timeout) closes its session: it is scored (``turn_limit``,
reward 0) and stored like any episode, never left to the reaper.

The agent's seat is ``agent`` (as in a plain eval), with verifiers' tool-less chat harness (``null``: medgym runs the
code, not the harness) in the local ``subprocess`` runtime by default; ``--env.agent.*`` overrides either. The model's
token data: verifiers' eval client relays text only; under its train client a trace's sampled message carries its
token ids, which each step sends with the reply (:func:`turn_tokens`), so the stored turns are token-exact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from medgym import _adapt
from medgym.client import AsyncClient, Client

__all__ = ["MedGymEnv", "MedGymEnvConfig", "MedGymTask", "MedGymTaskset", "MedGymTasksetConfig", "turn_tokens"]


class MedGymData(vf.TaskData):
    """One medgym task: ``id`` is its task id; the prompt comes from the session when the episode starts."""

    dataset: str | None = None
    split: str | None = None


class MedGymTask(vf.Task[MedGymData]):
    """A medgym task; scored by the server's verifier (the env records the reward on the trace)."""


class MedGymTasksetConfig(vf.TasksetConfig):
    base_url: str | None = None
    """medgym's environment API (`medgym env serve`); else $MEDGYM_URL."""
    token: str | None = None
    """Bearer token; else $MEDGYM_TOKEN."""
    dataset: str | None = None
    """The server's dataset to list tasks from (default: every dataset it offers)."""
    split: str | None = None
    """The dataset's split."""
    num_tasks: int = -1
    """How many tasks to list (-1: all)."""
    prompts: str | None = None
    """A `medgym export` prompts file (.jsonl or .parquet) to take the task ids from instead of the server's list."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Session options (max_turns, end_on, prompt_mode, ...); also $MEDGYM_OPTIONS."""


class MedGymTaskset(vf.Taskset[MedGymTask, MedGymTasksetConfig]):
    """medgym's tasks, from the server's task list (or a prompts file)."""

    def load(self) -> Iterator[MedGymTask]:
        cfg = self.config
        if cfg.prompts:
            rows = _prompt_rows(cfg.prompts)
        else:
            with Client(_url(cfg), token=_adapt.token({"token": cfg.token})) as c:
                views = c.tasks(dataset=cfg.dataset, split=cfg.split, limit=cfg.num_tasks if cfg.num_tasks > 0 else None)
            rows = [{"task_id": v["id"], "dataset": v.get("dataset"), "split": v.get("split")} for v in views]
        if cfg.num_tasks > 0:
            rows = rows[: cfg.num_tasks]
        if not rows:
            raise ValueError("medgym: no tasks to play (check dataset, split or the prompts file)")
        for r in rows:
            yield MedGymTask(MedGymData(id=r["task_id"], name=r["task_id"], dataset=r.get("dataset"), split=r.get("split")),
                             cfg.task)


def _prompt_rows(path: str) -> list[dict[str, Any]]:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _url(cfg: MedGymTasksetConfig) -> str:
    return _adapt.base_url({"base_url": cfg.base_url})


class MedGymEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime={"type": "subprocess"})
    """The policy's seat: verifiers' tool-less chat harness, run locally (medgym's sandbox runs the code)."""


class MedGymEnv(vf.Env[MedGymEnvConfig]):
    """One task, one medgym session: the agent's replies are the session's steps, the verifier's reward the trace's."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        cfg: MedGymTasksetConfig = self.taskset.config  # type: ignore[assignment]
        async with AsyncClient(_url(cfg), token=_adapt.token({"token": cfg.token})) as client:
            sess = await client.session(str(task.data.id), **_adapt.options(cfg.options))
            system = "\n\n".join(m["content"] for m in sess.messages if m["role"] == "system") or None
            prompt = [{"role": m["role"], "content": m["content"]} for m in sess.messages if m["role"] != "system"]
            data = type(task.data).model_validate({**task.data.model_dump(), "system_prompt": system, "prompt": prompt})
            played = type(task)(data, task.config)
            interaction = None
            try:
                async with agents.agent.interaction(played) as interaction:
                    segment = await interaction.turn()  # a prompted task speaks first: the model answers the prompt
                    while not segment.terminated:
                        reply = _reply(segment)
                        res = await sess.step(reply, **turn_tokens(interaction.trace))
                        if sess.done:
                            break
                        segment = await interaction.turn(res.observation)
            finally:
                closed = None if sess.done else await sess.close()  # stopped before done: scored and stored
            reward = float(sess.last.reward) if closed is None and sess.last else float((closed or {}).get("reward") or 0.0)
            outcome = sess.last.outcome if closed is None and sess.last else (closed or {}).get("outcome")
            trace = interaction.trace
            trace.record_reward("medgym_reward", reward)
            trace.record_metric("medgym_success", float(outcome == "correct"))
            trace.info["medgym"] = {"session_id": sess.id, "run_id": sess.run_id, "episode_id": sess.episode_id,
                                    "outcome": outcome}


def _reply(segment: vf.Segment) -> str:
    """The segment's last assistant message as the model wrote it (``Segment.last_reply`` is stripped)."""
    for m in reversed(segment.messages):
        if isinstance(m, vf.AssistantMessage):
            return m.content if isinstance(m.content, str) else segment.last_reply
    return segment.last_reply


def turn_tokens(trace: vf.Trace) -> dict[str, Any]:
    """The token data of the trace's last sampled message, as :meth:`medgym.AsyncSession.step` takes it: the ids the
    completion was generated from (the path's tokens up to the completion), the completion's ids and their logprobs.
    Empty when the trace carries no ids (verifiers' eval client relays text only)."""
    nodes = trace.nodes
    last = next((i for i in range(len(nodes) - 1, -1, -1) if nodes[i].sampled), None)
    if last is None:
        return {}
    node = nodes[last]
    if not node.token_ids or len(node.mask) != len(node.token_ids) or not any(node.mask):
        return {}
    first = node.mask.index(True)
    completion = node.token_ids[first:]
    path: list[int] = []
    parent = node.parent
    while parent is not None:
        path[:0] = nodes[parent].token_ids
        parent = nodes[parent].parent
    out: dict[str, Any] = {"prompt_token_ids": path + node.token_ids[:first], "token_ids": completion}
    if len(node.logprobs) == len(node.token_ids):
        out["logprobs"] = node.logprobs[first:]
    elif len(node.logprobs) == len(completion):
        out["logprobs"] = list(node.logprobs)
    return out
