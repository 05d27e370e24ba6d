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
session the loop left before done. The row's prompt must be the session's prompt: export with the options the sessions
use.

Token data: verl's loop hands an interaction the messages only. :class:`medgym.verl_agent.MedGymAgentLoop` (a
``ToolAgentLoop`` registered as ``medgym_agent``) hands it each turn's token data first (:meth:`MedGymInteraction.
hand_over`: the ids the turn was generated from, the completion's ids as generated, their logprobs when verl has them),
and the step sends them, so the stored turns are token-exact.

The reward: verl scores a rollout with its reward function, not with the interaction's turn rewards. medgym's is
:func:`compute_score`; name it in the trainer's config::

    reward.custom_reward_function.path=pkg://medgym.verl reward.custom_reward_function.name=compute_score

It reads the episode's reward as the server stored it (the verifier's score), through the session the rollout played:
every turn reward the interaction returns is a :class:`TurnScore`, a float that carries its session id, and verl hands
the rollout's turn rewards to the reward function in ``extra_info["turn_scores"]``. The dataset row's
``reward_model.ground_truth`` is only a task reference (``medgym://dataset/split/id``): the gold never leaves the
verifier. :func:`compute_score` is also the end of the rollout: verl 0.7.1 never calls ``finalize_interaction``, so a
rollout verl cut short (its ``max_assistant_turns`` or response length) leaves its session open, and
:func:`compute_score` ends it (``DELETE``): a scored episode (``turn_limit``, reward 0, kept in exports), never left to
the reaper, which stores what it reaps as ``abandoned`` (excluded from exports, so a GRPO group would lose exactly its
failures). Set the session's ``max_turns`` below verl's ``max_assistant_turns`` so that medgym's own turn limit, which
grades the last printed answer, ends an episode before verl cuts it.
"""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from verl.interactions.base import BaseInteraction

from . import _adapt
from ._reward import TurnScore, compute_score
from .client import AsyncClient, AsyncSession

__all__ = ["MedGymInteraction", "TurnScore", "compute_score"]


class MedGymInteraction(BaseInteraction):
    """medgym's environment API as a verl interaction; one session per verl request id."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.options = _adapt.options(config.get("options"))
        self.client = AsyncClient(_adapt.base_url(config), token=_adapt.token(config))
        self.sessions: dict[str, AsyncSession] = {}
        self.tokens: dict[str, dict[str, Any]] = {}  # the next step's token data, per interaction

    def hand_over(
        self, instance_id: str, prompt_ids: list[int], token_ids: list[int], logprobs: list[float] | None
    ) -> None:
        """The token data of the reply the next :meth:`generate_response` sends (MedGymAgentLoop calls this)."""
        self.tokens[instance_id] = {"prompt_token_ids": prompt_ids, "token_ids": token_ids, "logprobs": logprobs}

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
        res = await sess.step(str(reply.get("content") or ""), **self.tokens.pop(instance_id, {}))
        done = res.done or res.truncated
        return done, res.observation, TurnScore(res.reward, sess.id), dict(res.info)

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return float(sum(self._session(instance_id).rewards))

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        sess = self.sessions.pop(instance_id, None)
        self.tokens.pop(instance_id, None)
        if sess is not None and not sess.done:
            await sess.close()

    def _session(self, instance_id: str) -> AsyncSession:
        try:
            return self.sessions[instance_id]
        except KeyError:
            raise ValueError(f"medgym: unknown interaction {instance_id} (start_interaction first)") from None
