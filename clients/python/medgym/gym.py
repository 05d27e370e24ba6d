"""Gymnasium adapter: :class:`MedGymEnv`, registered as ``medgym/MedGym-v0`` when this module is imported (``import
medgym`` alone registers nothing); an id with the module in front imports it for you.

    import gymnasium
    env = gymnasium.make("medgym.gym:medgym/MedGym-v0", base_url="http://127.0.0.1:8700", dataset="medcalcbench", split="test")
    obs, info = env.reset(seed=0)          # obs: the task's user message; info["messages"]: the whole prompt
    obs, reward, terminated, truncated, info = env.step('{"action": "validate_code", "params": {"code": "..."}}')

An action is the model's raw reply (text), parsed on the server by medgym's own parser; an observation is the text
medgym shows the model next (code output, a parse error, a verdict without the gold value). Each reset starts a new
server session (an episode stored like any other when it ends); a session left unfinished by a reset or close is
ended on the server (DELETE), so it is scored and stored too.

Spaces: ``gymnasium.spaces.Text`` over the Basic Multilingual Plane (every character U+0000..U+FFFF but the
surrogates): code output can hold any of those. A character outside it (an emoji in a program's output) would make
``observation_space.contains`` false; the observation is passed on unchanged all the same.
"""

from __future__ import annotations

from typing import Any

import gymnasium
from gymnasium import spaces

from .client import Client, Session, StepResult

ENV_ID = "medgym/MedGym-v0"

# Every BMP character but the UTF-16 surrogates (which no Python str from JSON holds alone).
CHARSET: frozenset[str] = frozenset(chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF)


class MedGymEnv(gymnasium.Env[str, str]):
    """One medgym episode per reset, played through a live ``medgym env serve``.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8700`` (or pass ``client``).
        dataset, split: which tasks to draw from (``GET /v1/tasks?dataset=&split=``).
        task_ids: draw from these task ids instead of listing the server's.
        limit: list at most this many tasks.
        token: bearer token, when the server requires one.
        options: session options sent with each new session (max_turns, end_on, verifier_mode, run_id, tags, ...).
        client: a :class:`medgym.Client` to use instead of making one.
        max_action_length, max_observation_length: the Text spaces' bounds.

    ``reset(seed=s)`` picks the task with the env's seeded generator (the same seed gives the same task) and sends
    the seed with the session; ``reset(options={"task_id": ...})`` plays that task; other keys of ``options``
    override the session options for that episode.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        base_url: str | None = None,
        *,
        dataset: str | None = None,
        split: str | None = None,
        task_ids: list[str] | None = None,
        limit: int | None = None,
        token: str | None = None,
        options: dict[str, Any] | None = None,
        client: Client | None = None,
        render_mode: str | None = None,
        max_action_length: int = 65536,
        max_observation_length: int = 1 << 22,
    ) -> None:
        if client is None:
            if not base_url:
                raise ValueError("MedGymEnv: base_url (or client) is required, e.g. base_url='http://127.0.0.1:8700'")
            client = Client(base_url, token=token)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"MedGymEnv: render_mode {render_mode!r} is not one of {self.metadata['render_modes']}")
        self.client = client
        self.dataset = dataset
        self.split = split
        self.limit = limit
        self.session_options = dict(options or {})
        self.render_mode = render_mode
        self.action_space = spaces.Text(max_action_length, min_length=0, charset=CHARSET)
        self.observation_space = spaces.Text(max_observation_length, min_length=0, charset=CHARSET)
        self._task_ids: list[str] | None = list(task_ids) if task_ids else None
        self.session: Session | None = None
        self._last_obs = ""

    def task_ids(self) -> list[str]:
        """The ids this env draws from (listed from the server once, in its order)."""
        if self._task_ids is None:
            ids: list[str] = []
            page = 500 if self.limit is None else min(500, self.limit)
            while self.limit is None or len(ids) < self.limit:
                want = page if self.limit is None else min(page, self.limit - len(ids))
                got = self.client.tasks(dataset=self.dataset, split=self.split, limit=want, offset=len(ids))
                ids.extend(t["id"] for t in got)
                if len(got) < want:
                    break
            if not ids:
                raise ValueError(f"MedGymEnv: the server lists no task for dataset={self.dataset!r} split={self.split!r}")
            self._task_ids = ids
        return self._task_ids

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._end_session()
        opts = dict(self.session_options)
        opts.update(options or {})
        task_id = opts.pop("task_id", None)
        if task_id is None:
            ids = self.task_ids()
            task_id = ids[int(self.np_random.integers(len(ids)))]
        if seed is not None:
            opts.setdefault("seed", seed)
        self.session = self.client.session(task_id, **opts)
        messages = self.session.messages
        obs = _last_user(messages)
        self._last_obs = obs
        info = {"session_id": self.session.id, "task_id": task_id, "messages": messages, "tools": self.session.tools}
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.session is None:
            raise RuntimeError("MedGymEnv: step() before reset()")
        if not isinstance(action, str):
            raise TypeError(f"MedGymEnv: an action is the model's reply as str, got {type(action).__name__}")
        r: StepResult = self.session.step(action)
        self._last_obs = r.observation
        # info is the server's (outcome, action, parse_error, verdict, turn, and at done the stored row); the
        # session's id is in reset's info and env.session: a step's info holds nothing that differs between two
        # plays of the same seed and actions (gymnasium's determinism check).
        # The server's done covers both endings; gymnasium's terminated is the task's own end, truncated a limit's.
        return r.observation, r.reward, r.done and not r.truncated, r.truncated, dict(r.info)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    def close(self) -> None:
        self._end_session()
        super().close()

    def _end_session(self) -> None:
        """End the current session on the server unless its episode is done (then it is stored already)."""
        s, self.session = self.session, None
        if s is not None and not s.done and s.closed is None:
            s.close()


def _last_user(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return ""


def register_envs() -> None:
    """Register ``medgym/MedGym-v0`` (idempotent)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="medgym.gym:MedGymEnv")


register_envs()

__all__ = ["MedGymEnv", "ENV_ID", "CHARSET", "register_envs"]
