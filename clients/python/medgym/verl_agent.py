"""verl adapter: :class:`MedGymAgentLoop`, a verl agent loop (verl 0.9: ``verl.experimental.agent_loop``) that plays
each dataset row as one medgym session.

verl 0.8 replaced interactions (``BaseInteraction``) with agent loops: an agent loop's ``run`` gets a dataset row and
the rollout server (``server_manager.generate``: token ids in, token ids and logprobs out) and returns the token
sequence verl trains on. This one opens a session for the row's task (``extra_info.interaction_kwargs.task_id``, as
``medgym export`` writes it), tokenises the session's prompt with verl's own builder, and for each generation sends the
completion to the server (decoded; the server parses it with medgym's parser and runs code in medgym's sandbox) with
its token data: the ids it was generated from, the ids as generated and their logprobs, so every stored turn is
token-exact. The observation comes back as the next user message, tokenised by verl (mask 0). The episode's reward,
the verifier's, is the loop's ``reward_score``: verl puts it in the batch (``rm_scores``) and runs no reward function
for the rollout.

A rollout ends when the server says done, or when verl's limits cut it (``response_length``, ``multi_turn.
max_assistant_turns``): the session is then closed (``DELETE``), so the episode is scored (``turn_limit``, reward 0)
and stored, never left to the reaper. Register it with verl's agent loop config file, which names the class and its
keyword arguments (verl's workers load it; a ``@register`` in this module would not be imported there, and importing it
would replace the file's entry of the same name with one without the arguments)::

    # medgym_agent.yaml
    - name: medgym_agent
      _target_: medgym.verl_agent.MedGymAgentLoop
      base_url: http://127.0.0.1:8700        # else $MEDGYM_URL
      options: {max_turns: 10}               # session options

    actor_rollout_ref.rollout.agent.agent_loop_config_path=medgym_agent.yaml
    actor_rollout_ref.rollout.agent.default_agent_loop=medgym_agent

The row's prompt is replaced by the session's (the same text when the export used the sessions' options).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from . import _adapt
from ._reward import TurnScore
from .client import AsyncClient, AsyncSession

__all__ = ["MedGymAgentLoop"]


class MedGymAgentLoop(AgentLoopBase):
    """medgym's environment API as a verl agent loop: one session per rollout, the verifier's reward as its score."""

    def __init__(
        self,
        *args: Any,
        base_url: str | None = None,
        token: str | None = None,
        options: dict[str, Any] | None = None,
        name: str | None = None,
        tools: Any = None,
        **kwargs: Any,
    ):
        # name: the entry's name in verl's agent loop config; tools: verl's tool list, which medgym does not use (the
        # server runs the code).
        super().__init__(*args, **kwargs)
        self.medgym_url = _adapt.base_url({"base_url": base_url})
        self.medgym_token = _adapt.token({"token": token})
        self.options = _adapt.options(dict(options) if options is not None else None)
        self.response_length = int(self.rollout_config.response_length)
        self.max_assistant_turns = int(self.rollout_config.multi_turn.get("max_assistant_turns") or 0)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = kwargs.get("extra_info") or {}
        task = _adapt.task_id({**(extra.get("interaction_kwargs") or {}), "extra_info": extra})
        async with AsyncClient(self.medgym_url, token=self.medgym_token) as client:
            sess = await client.session(task, **self.options)
            try:
                return await self._play(sess, sampling_params)
            finally:
                if not sess.done:
                    # cut by verl's limits, or an error: the episode is scored and stored, not reaped as abandoned
                    await sess.close()

    async def _play(self, sess: AsyncSession, sampling_params: dict[str, Any]) -> AgentLoopOutput:
        messages = [{"role": m["role"], "content": m["content"]} for m in sess.messages]
        ids = await self.ct_build_initial_tokens(messages)
        start = len(ids)
        mask: list[int] = []
        logprobs: list[float] = []
        request_id = uuid4().hex
        scores: list[float] = []
        turns = 0
        while True:
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=ids, sampling_params=sampling_params)
            generated = list(out.token_ids)
            lps = list(out.log_probs) if out.log_probs else None
            prompt = list(ids)
            merged, mask, merged_lps = await self.ct_merge_assistant_token(
                ids, generated, mask, logprobs if (logprobs or lps) else None, assistant_logprobs=lps)
            logprobs = list(merged_lps or [])
            ids = list(merged.token_ids)
            turns += 1
            reply = self.tokenizer.decode(generated, skip_special_tokens=True)
            res = await sess.step(reply, prompt_token_ids=prompt, token_ids=generated, logprobs=lps)
            scores.append(TurnScore(res.reward, sess.id))
            if sess.done or len(mask) >= self.response_length or (self.max_assistant_turns and turns >= self.max_assistant_turns):
                break
            before = [*messages, {"role": "assistant", "content": reply}]
            messages = [*before, {"role": "user", "content": res.observation}]
            merged, grown, grown_lps = await self.ct_merge_context_msg(before, messages, ids, mask, logprobs or None)
            if len(grown) >= self.response_length:
                break
            ids, mask, logprobs = list(merged.token_ids), grown, list(grown_lps or [])

        if sess.done:
            reward = float(sess.rewards[-1])
        else:
            closed = await sess.close()
            reward = float(closed.get("reward") or 0.0)
        prompt_ids = ids[: len(ids) - len(mask)] if mask else ids[:start]
        response_ids = ids[len(prompt_ids):]
        output = AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=reward,
            num_turns=2 * turns,
            metrics=AgentLoopMetrics(),
        )
        output.extra_fields.update({"turn_scores": scores, "tool_rewards": [], "medgym_session_id": sess.id,
                                    "medgym_episode": {"run_id": sess.run_id, "episode_id": sess.episode_id}})
        return output
