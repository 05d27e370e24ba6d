"""verl adapter: :class:`MedGymInteraction`, a ``verl.interactions.base.BaseInteraction`` (verl 0.7.1, the last release
with interactions; 0.8 replaced them with agent loops).

verl's multi-turn agent loop (``ToolAgentLoop`` with ``actor_rollout_ref.rollout.multi_turn.interaction_config_path``)
picks the interaction of each dataset row by ``extra_info.interaction_kwargs.name`` and calls::

    await interaction.start_interaction(request_id, **interaction_kwargs)
    # after each assistant turn, with the whole conversation so far:
    done, text, score, meta = await interaction.generate_response(request_id, messages, **interaction_kwargs)

``medgym export`` writes the dataset (``verl/<dataset>_<split>.parquet``) whose rows name ``medgym`` with the task id;
the interaction config names this class::

    interaction:
      - name: medgym
        class_name: medgym.verl.MedGymInteraction
        config: {base_url: "http://127.0.0.1:8700", options: {max_turns: 15}}

``start_interaction`` opens a session, ``generate_response`` sends the last assistant message (raw: the server parses
it with medgym's parser) and returns the observation as the next user turn, the reward (0 until done, then the
verifier's) and whether the episode is over; ``calculate_score`` is the reward so far; ``finalize_interaction`` ends a
session the loop left before done (verl 0.7.1's loop does not call it: such a session is reaped by the server and
stored as ``abandoned``). The row's prompt must be the session's prompt: export with the options the sessions use.
"""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from verl.interactions.base import BaseInteraction

from . import _adapt
from .client import AsyncClient, AsyncSession


class MedGymInteraction(BaseInteraction):
    """medgym's environment API as a verl interaction; one session per verl request id."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.options = _adapt.options(config.get("options"))
        self.client = AsyncClient(_adapt.base_url(config), token=_adapt.token(config))
        self.sessions: dict[str, AsyncSession] = {}

    async def start_interaction(self, instance_id: Optional[str] = None, **kwargs: Any) -> str:
        instance_id = instance_id or uuid4().hex
        if instance_id in self.sessions:
            raise ValueError(f"medgym: interaction {instance_id} is already started")
        self.sessions[instance_id] = await self.client.session(_adapt.task_id(kwargs), **self.options)
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        sess = self._session(instance_id)
        reply = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
        if reply is None:
            raise ValueError("medgym: generate_response without an assistant message")
        res = await sess.step(str(reply.get("content") or ""))
        done = res.done or res.truncated
        return done, res.observation, res.reward, dict(res.info)

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return float(sum(self._session(instance_id).rewards))

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        sess = self.sessions.pop(instance_id, None)
        if sess is not None and not sess.done:
            await sess.close()

    def _session(self, instance_id: str) -> AsyncSession:
        try:
            return self.sessions[instance_id]
        except KeyError:
            raise ValueError(f"medgym: unknown interaction {instance_id} (start_interaction first)") from None
