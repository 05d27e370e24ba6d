"""SkyRL-gym adapter: :class:`MedGymTextEnv`, a ``skyrl_gym`` ``BaseTextEnv`` (skyrl-gym 0.4.0) registered as
``medgym``.

SkyRL's generator makes one environment per trajectory with ``skyrl_gym.make(row["env_class"], env_config=...,
extras=row_extras)``, calls ``init(prompt)`` and then ``step(model_text)`` until ``done``. Rows of
``medgym export``'s prompt-only dataset (``prompts/<dataset>_<split>.parquet``) carry ``env_class: medgym`` and
``task_id``; SkyRL passes every column besides ``prompt`` and ``env_class`` as ``extras``. The server is named by
``env_config.base_url`` or $MEDGYM_URL (token $MEDGYM_TOKEN, options $MEDGYM_OPTIONS). SkyRL 0.3.0's generator passes
``getattr(cfg.environment.skyrl_gym, env_class, {})`` as ``env_config``, and its config refuses keys its dataclasses do
not declare (``environment.skyrl_gym.medgym.base_url=...`` is an error), so with stock SkyRL the environment variables
name the server; a ``SkyRLGymConfig`` subclass with a ``medgym: dict`` field (SkyRL's way to add config) passes it as
``env_config``.

- ``init`` opens a session for the row's task and returns the server's system and user messages (the prompt medgym's
  llm-worker builds; the row's prompt is the same text when exported with the same options).
- ``step`` sends the model's raw reply; the server parses it with medgym's parser, runs code in medgym's sandbox and
  answers the observation (as a user message), the reward (0 until done, then the verifier's) and done.
- ``close`` ends a session SkyRL abandons before done (scored and stored like any episode).

SkyRL's ``max_turns`` (the generator puts it in ``extras``) is sent as the session's ``max_turns``, so medgym's turn
limit and SkyRL's agree.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from . import _adapt
from .client import Client, Session

ENV_CLASS = "medgym"


class MedGymTextEnv(BaseTextEnv):
    """One medgym episode as a SkyRL text environment."""

    def __init__(self, env_config: Any = None, extras: Dict[str, Any] | None = None):
        super().__init__()
        cfg = dict(env_config or {})
        self.extras = dict(extras or {})
        self.task_id = _adapt.task_id(self.extras)
        self.options = _adapt.options(cfg.get("options"), self.extras)
        if "max_turns" in self.options:
            self.max_turns = int(self.options["max_turns"])
        self.client = Client(_adapt.base_url(cfg), token=_adapt.token(cfg))
        self.session: Session | None = None

    def init(self, prompt: List[Dict[str, str]]) -> Tuple[List[Dict[str, str]], Dict[str, Any]]:
        self.session = self.client.session(self.task_id, **self.options)
        created = self.session.created
        meta = {k: created.get(k) for k in ("session_id", "run_id", "episode_id")}
        return [{"role": m["role"], "content": m["content"]} for m in self.session.messages], meta

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.session is None:
            raise RuntimeError("medgym: step before init")
        res = self.session.step(action)
        self.turns += 1
        done = res.done or res.truncated
        obs = [] if done or not res.observation else [{"role": "user", "content": res.observation}]
        return BaseTextEnvStepOutput(observations=obs, reward=res.reward, done=done, metadata=dict(res.info))

    def close(self) -> None:
        try:
            if self.session is not None and not self.session.done:
                self.session.close()
        finally:
            self.client.close()

    def get_metrics(self) -> Dict[str, Any]:
        last = self.session.last if self.session else None
        return {"turns": self.turns, "success": float(bool(last and last.info.get("outcome") == "correct"))}


def register() -> None:
    """Register :class:`MedGymTextEnv` with skyrl_gym as ``medgym`` (done on import; a second call is a no-op)."""
    import skyrl_gym

    if ENV_CLASS not in skyrl_gym.registry:
        skyrl_gym.register(id=ENV_CLASS, entry_point="medgym.skyrl:MedGymTextEnv")


register()
