"""OpenRLHF adapter: the agent-mode file (OpenRLHF 0.11.2) to pass as ``--train.agent_func_path``.

OpenRLHF loads this file, instantiates ``AgentExecutor`` (a ``MultiTurnAgentExecutor`` over :class:`AgentInstance`)
and, per prompt, makes an ``AgentInstance()``, awaits ``reset({"observation": prompt, "label": label})`` and then,
after each generation, ``step({"observation_text", "action_text", "label", "sampling_params"})`` until ``done``.

Data: ``medgym export``'s prompt-only dataset with ``--data.input_key prompt --data.apply_chat_template
--data.label_key task_id``: the label is the task id. The server is $MEDGYM_URL (token $MEDGYM_TOKEN, session options
$MEDGYM_OPTIONS as a JSON object): OpenRLHF constructs the instance without arguments.

``step`` sends the model's raw text (the server parses it with medgym's parser) and returns the observation wrapped
in the chat template's user turn ($MEDGYM_FEEDBACK_TEMPLATE, default ChatML, ``{observation}`` replaced), the reward
(0 until done, then the verifier's) as ``rewards`` and ``scores`` tensors, ``done``, and the step's info as
``extra_logs`` (numbers only). OpenRLHF's loop stops without telling the instance when its token budget
(``max_length``) runs out; :class:`AgentExecutor` then ends the session (``DELETE``), so the episode is scored
(``turn_limit``, reward 0) and stored like any, never left to the server's reaper (which stores what it reaps as
``abandoned``, excluded from exports: a group would lose exactly its failures).
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from medgym import _adapt
from medgym.client import AsyncClient, AsyncSession

FEEDBACK_ENV = "MEDGYM_FEEDBACK_TEMPLATE"
# ChatML (Qwen and most instruct models): close the assistant turn, the observation as a user turn, open the next.
CHATML_FEEDBACK = "<|im_end|>\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n"

# The instances an AgentExecutor.execute call made (OpenRLHF makes one per prompt inside execute, which it runs as
# its own task, so each call sees its own list).
_made: contextvars.ContextVar[list["AgentInstance"] | None] = contextvars.ContextVar("medgym_openrlhf_made", default=None)


class AgentInstance(AgentInstanceBase):
    """One medgym episode in OpenRLHF's agent mode."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.client = AsyncClient(_adapt.base_url(), token=_adapt.token())
        self.options = _adapt.options()
        self.template = os.environ.get(FEEDBACK_ENV) or CHATML_FEEDBACK
        self.session: AsyncSession | None = None
        made = _made.get()
        if made is not None:
            made.append(self)

    async def finish(self) -> None:
        """End the rollout: a session not done is ended on the server (scored and stored); the client is closed."""
        try:
            if self.session is not None and not self.session.done and self.session.closed is None:
                await self.session.close()
        finally:
            await self.client.aclose()

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        self.session = await self.client.session(_adapt.ref_task_id(str(states["label"])), **self.options)
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        if self.session is None:
            raise RuntimeError("medgym: step before reset")
        res = await self.session.step(states["action_text"])
        done = res.done or res.truncated
        feedback = "" if done else self.template.replace("{observation}", res.observation)
        logs = {k: float(v) for k, v in res.info.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        logs["accepted"] = float(bool(res.info.get("accepted")))
        return {
            "rewards": torch.tensor(res.reward),
            "scores": torch.tensor(res.reward),
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": logs,
        }


class AgentExecutor(MultiTurnAgentExecutor):
    """What OpenRLHF's ``_load_agent_executor`` instantiates from this file."""

    def __init__(self) -> None:
        super().__init__(AgentInstance)

    async def execute(self, *args: Any, **kwargs: Any) -> dict:
        """OpenRLHF's rollout of one prompt; afterwards its instance's session is ended whether or not OpenRLHF's loop
        reached done (a loop cut by its token budget never calls the instance again)."""
        made: list[AgentInstance] = []
        token = _made.set(made)
        try:
            return await super().execute(*args, **kwargs)
        finally:
            _made.reset(token)
            for inst in made:
                await inst.finish()
