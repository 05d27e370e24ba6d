"""verl agent loop that hands the interaction each turn's token data: :class:`MedGymAgentLoop`, verl 0.7.1's
``ToolAgentLoop`` (registered as ``medgym_agent``).

verl's loop calls an interaction with the conversation's messages only; the ids it generated from, the completion's
ids and their logprobs stay in its ``AgentData``. This loop passes them to :class:`medgym.verl.MedGymInteraction`
before each ``generate_response``, so the step that sends the reply also sends its token data, and the stored turn
holds the ids verl trains on. Select it for medgym's rows (``actor_rollout_ref.rollout.agent.default_agent_loop=
medgym_agent``, or an ``agent_name`` column) and import this module where verl's agent loop workers run (e.g. the
interaction config's class lives next to it: ``medgym.verl`` imports nothing from here, so verl's interaction alone
still works, storing text only).
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

__all__ = ["MedGymAgentLoop"]


@register("medgym_agent")
class MedGymAgentLoop(ToolAgentLoop):
    """``ToolAgentLoop`` that hands the interaction (when it takes them: ``hand_over``) the last turn's token data."""

    async def _handle_interacting_state(self, agent_data: Any) -> Any:
        hand_over = getattr(agent_data.interaction, "hand_over", None)
        ids = list(agent_data.response_ids)
        if callable(hand_over) and ids:
            # The generating state appended the completion to prompt_ids; logprobs are kept per response token
            # (0 for the environment's) only when every generation returned them.
            prompt = list(agent_data.prompt_ids[: len(agent_data.prompt_ids) - len(ids)])
            logprobs = None
            if agent_data.response_logprobs and len(agent_data.response_logprobs) == len(agent_data.response_mask):
                logprobs = list(agent_data.response_logprobs[-len(ids) :])
            hand_over(agent_data.request_id, prompt, ids, logprobs)
        return await super()._handle_interacting_state(agent_data)
