"""verifiers / prime-rl adapter: :func:`load_environment` returns :class:`MedGymEnv`, a ``verifiers`` ``MultiTurnEnv``
(verifiers 0.3.1: the v0 API, ``import verifiers as vf``; 0.4.0 dropped it for the v1 stack) scored by medgym's rubric.

Each rollout opens a session for its row's task (``info.task_id``) in ``setup_state`` and takes the server's system
and user messages as its prompt (the prompt medgym's llm-worker builds). ``env_response`` sends the last assistant
message, raw (the server parses it with medgym's parser, runs code in medgym's sandbox), and answers the observation as
a user message; when the server says done the observation is the final environment response and the rollout stops.
The rubric's reward is the verifier's reward at done (``medgym_reward``), with the outcome's success as a metric
(weight 0). A rollout that stops before done (verifiers' own turn limit, an error) closes its session in cleanup, so it
is scored and stored like any episode.

    import verifiers as vf
    env = vf.load_environment("medgym", base_url="http://127.0.0.1:8700", dataset="medcalcbench", split="test")

The rows come from the server's task list (``dataset``, ``split``, ``num_examples``) or from a ``medgym export``
prompts file (``prompts="out/prompts/medcalcbench_test.jsonl"``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import verifiers as vf
from datasets import Dataset

from . import _adapt
from .client import AsyncClient, AsyncSession, Client

STATE_KEY = "medgym"


def _field(m: Any, name: str) -> Any:
    return m.get(name) if isinstance(m, dict) else getattr(m, name, None)


async def medgym_reward(state: dict, **kwargs: Any) -> float:
    """The verifier's reward of the episode (0 when it never reached done)."""
    return float((state.get(STATE_KEY) or {}).get("reward", 0.0))


async def medgym_success(state: dict, **kwargs: Any) -> float:
    """1 when the episode's outcome is ``correct``."""
    return float((state.get(STATE_KEY) or {}).get("outcome") == "correct")


def rubric() -> vf.Rubric:
    """medgym's rubric: the verifier's reward (weight 1) and success (a metric, weight 0)."""
    return vf.Rubric(funcs=[medgym_reward, medgym_success], weights=[1.0, 0.0])


class MedGymEnv(vf.MultiTurnEnv):
    """medgym's environment API as a verifiers ``MultiTurnEnv``."""

    def __init__(self, base_url: str, *, token: str | None = None, options: dict[str, Any] | None = None, **kwargs: Any):
        self.medgym_options = _adapt.options(options)
        self.medgym_url, self.medgym_token = base_url, token
        # One limit for both: medgym's max_turns (else verifiers' max_turns, else 15). verifiers stops a rollout once
        # its trajectory holds max_turns replies, before env_response sees the last one, so its limit is one more:
        # the last reply still runs on the server, whose turn limit ends (and grades) the episode.
        theirs = int(kwargs.get("max_turns") or 0)
        turns = int(self.medgym_options.get("max_turns") or (theirs if theirs > 0 else 15))
        self.medgym_options["max_turns"] = turns
        kwargs["max_turns"] = turns + 1
        kwargs.setdefault("rubric", rubric())
        super().__init__(**kwargs)
        self._client: AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _api(self) -> AsyncClient:
        # One client per event loop: an httpx pool cannot outlive its loop, and evaluate_sync runs a loop per call.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client, self._client_loop = AsyncClient(self.medgym_url, token=self.medgym_token), loop
        return self._client

    async def setup_state(self, state: vf.State) -> vf.State:
        info = state.get("info") or {}
        if isinstance(info, str):
            info = json.loads(info)
        sess = await self._api().session(_adapt.task_id(info), **self.medgym_options)
        state[STATE_KEY] = {"session": sess, "session_id": sess.id, "reward": 0.0, "outcome": None,
                            "run_id": sess.created.get("run_id"), "episode_id": sess.created.get("episode_id")}
        state["prompt"] = vf.utils.message_utils.normalize_messages(
            [{"role": m["role"], "content": m["content"]} for m in sess.messages], field_name="medgym.prompt")
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        med = state[STATE_KEY]
        sess: AsyncSession = med["session"]
        reply = next((m for m in reversed(messages) if _field(m, "role") == "assistant"), None)
        res = await sess.step(str(_field(reply, "content") or "") if reply is not None else "")
        out = [{"role": "user", "content": res.observation}] if res.observation else []
        if res.done or res.truncated:
            med["reward"], med["outcome"] = res.reward, res.info.get("outcome")
            state["final_env_response"] = out
        return out

    @vf.cleanup
    async def close_medgym_session(self, state: vf.State) -> None:
        med = state.get(STATE_KEY) or {}
        sess: AsyncSession | None = med.pop("session", None)
        if sess is not None and not sess.done:
            closed = await sess.close()
            med["reward"], med["outcome"] = float(closed.get("reward") or 0.0), closed.get("outcome")


def task_rows(base_url: str, *, token: str | None = None, dataset: str | None = None, split: str | None = None,
              num_examples: int = -1, prompts: str | None = None) -> Dataset:
    """The rows a :class:`MedGymEnv` plays: from a ``medgym export`` prompts file (.jsonl or .parquet), else from the
    server's task list. Each has ``prompt`` (placeholder question when listed: the session's prompt replaces it),
    and ``info.task_id``."""
    if prompts:
        ds = Dataset.from_parquet(prompts) if prompts.endswith(".parquet") else Dataset.from_json(prompts)
        rows = [{"prompt": r["prompt"], "info": {"task_id": r["task_id"]}} for r in ds]
    else:
        with Client(base_url, token=token) as c:
            views = c.tasks(dataset=dataset, split=split, limit=num_examples if num_examples > 0 else None)
        rows = [{"prompt": [{"role": "user", "content": v.get("question", "")}], "info": {"task_id": v["id"]}}
                for v in views]
    if num_examples > 0:
        rows = rows[:num_examples]
    if not rows:
        raise ValueError("medgym: no tasks to play (check dataset, split or the prompts file)")
    return Dataset.from_list(rows)


def load_environment(base_url: str | None = None, *, token: str | None = None, dataset: str | None = None,
                     split: str | None = None, num_examples: int = -1, prompts: str | None = None,
                     options: dict[str, Any] | None = None, **kwargs: Any) -> MedGymEnv:
    """verifiers' entry point: a :class:`MedGymEnv` over the tasks of dataset/split (or a prompts file) on the server at
    base_url (default $MEDGYM_URL)."""
    url = _adapt.base_url({"base_url": base_url})
    tok = _adapt.token({"token": token})
    rows = task_rows(url, token=tok, dataset=dataset, split=split, num_examples=num_examples, prompts=prompts)
    return MedGymEnv(url, token=tok, options=options, eval_dataset=rows, dataset=rows, **kwargs)
