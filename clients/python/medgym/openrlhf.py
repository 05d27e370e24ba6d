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
``extra_logs`` (numbers only). Token data: :class:`AgentExecutor` hands OpenRLHF's loop an engine that records each
generation (the transcript's ids it generated from, the completion's ids as generated, their logprobs when the
sampling asks for them), and ``step`` sends them with the reply, so the stored turn holds exactly the ids OpenRLHF
trains on. The feedback's leading close of the assistant turn (``<|im_end|>`` in ChatML) is dropped when the
generation already ended with that token (vLLM keeps the EOS in the completion's ids, not in its text): the
transcript's ids are then the chat template's, with one close per turn. OpenRLHF's loop stops without telling the
instance when its token budget (``max_length``) runs out; :class:`AgentExecutor` then ends the session
(``DELETE``), so the episode is scored (``turn_limit``, reward 0) and stored like any, never left to the server's reaper (which stores what it reaps as
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
        self.generated: _Generation | None = None  # the last generation, set by the executor's engine
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
        gen, self.generated = self.generated, None
        tokens: dict[str, Any] = {}
        if gen is not None:
            tokens = {"prompt_token_ids": gen.prompt_ids, "token_ids": gen.token_ids, "logprobs": gen.logprobs}
        res = await self.session.step(states["action_text"], **tokens)
        done = res.done or res.truncated
        feedback = "" if done else self.template.replace("{observation}", res.observation)
        if gen is not None and gen.closed and feedback.startswith(gen.closed):
            feedback = feedback[len(gen.closed) :]
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


class _Generation:
    """One generation as OpenRLHF's loop made it: the ids it generated from, the completion's ids and logprobs, and
    the completion's closing special token as text ("" when it ended otherwise, e.g. at its length limit)."""

    def __init__(self, prompt_ids: list[int], token_ids: list[int], logprobs: list[float] | None, closed: str) -> None:
        self.prompt_ids, self.token_ids, self.logprobs, self.closed = prompt_ids, token_ids, logprobs, closed


class _RecordingEngine:
    """OpenRLHF's ``llm_engine`` (vLLM), recording each generation for the instances of one ``execute`` call."""

    def __init__(self, engine: Any, tokenizer: Any, made: list["AgentInstance"]) -> None:
        self._engine, self._tokenizer, self._made = engine, tokenizer, made
        self._special = set(getattr(tokenizer, "all_special_ids", None) or [])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def generate(self, prompt_token_ids: Any, sampling_params: Any, *args: Any, **kwargs: Any) -> Any:
        out = await self._engine.generate(prompt_token_ids, sampling_params, *args, **kwargs)
        gen = out.outputs[0]
        ids = [int(i) for i in gen.token_ids]
        logprobs = None
        if getattr(gen, "logprobs", None):
            # vLLM's: per completion token, a dict of candidates (the sampled one among them).
            logprobs = [float(lp[i].logprob) for lp, i in zip(gen.logprobs, ids)]
        closed = ""
        if ids and ids[-1] in self._special:
            closed = self._tokenizer.decode(ids[-1:], skip_special_tokens=False)
        g = _Generation([int(i) for i in prompt_token_ids], ids, logprobs, closed)
        for inst in self._made:
            inst.generated = g
        return out


class AgentExecutor(MultiTurnAgentExecutor):
    """What OpenRLHF's ``_load_agent_executor`` instantiates from this file."""

    def __init__(self) -> None:
        super().__init__(AgentInstance)

    async def execute(self, *args: Any, **kwargs: Any) -> dict:
        """OpenRLHF's rollout of one prompt; afterwards its instance's session is ended whether or not OpenRLHF's loop
        reached done (a loop cut by its token budget never calls the instance again)."""
        made: list[AgentInstance] = []
        token = _made.set(made)
        args, kwargs = _recording(args, kwargs, made)
        try:
            return await super().execute(*args, **kwargs)
        finally:
            _made.reset(token)
            for inst in made:
                await inst.finish()


def _recording(args: tuple, kwargs: dict, made: list[AgentInstance]) -> tuple[tuple, dict]:
    """``execute``'s arguments (prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images) with
    the engine wrapped in a :class:`_RecordingEngine`."""
    names = ("prompt", "label", "sampling_params", "max_length", "hf_tokenizer", "llm_engine", "images")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if bound.get("llm_engine") is not None:
        bound["llm_engine"] = _RecordingEngine(bound["llm_engine"], bound.get("hf_tokenizer"), made)
    return (), bound
