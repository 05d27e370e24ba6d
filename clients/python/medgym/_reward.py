"""verl's reward function for medgym episodes (:func:`compute_score`), kept free of verl imports so it runs, and is
tested, wherever the client does; :mod:`medgym.verl` exports it."""

from __future__ import annotations

from typing import Any, Mapping

from . import _adapt
from .client import Client

__all__ = ["TurnScore", "compute_score", "session_of"]

# Where a loop may carry the session id besides the turn rewards (a custom agent loop, or a later verl that passes
# the interaction's metadata on): extra_info["medgym_session_id"], or extra_info["interaction_kwargs"]["session_id"].
SESSION_KEY = "medgym_session_id"


class TurnScore(float):
    """A turn reward (a float, as verl expects) that names the medgym session it came from, so the reward function,
    which runs in another process and sees only ``extra_info``, finds the episode the rollout played."""

    session_id: str

    def __new__(cls, value: float, session_id: str) -> "TurnScore":
        obj = super().__new__(cls, float(value))
        obj.session_id = str(session_id)
        return obj

    def __reduce__(self):  # pickled across processes (Ray) with its session id
        return (TurnScore, (float(self), self.session_id))


def session_of(extra_info: Mapping[str, Any] | None) -> str | None:
    """The session a rollout played, from verl's ``extra_info``: the last :class:`TurnScore` in ``turn_scores``, else
    ``extra_info["medgym_session_id"]`` or ``extra_info["interaction_kwargs"]["session_id"]``; None when none names
    one."""
    info = extra_info or {}
    for v in reversed(list(info.get("turn_scores") or [])):
        sid = getattr(v, "session_id", None)
        if sid:
            return str(sid)
    sid = info.get(SESSION_KEY) or (info.get("interaction_kwargs") or {}).get("session_id")
    return str(sid) if sid else None


def compute_score(
    data_source: str | None = None,
    solution_str: str | None = None,
    ground_truth: str | None = None,
    extra_info: Mapping[str, Any] | None = None,
    base_url: str | None = None,
    token: str | None = None,
    **kwargs: Any,
) -> float:
    """verl's ``custom_reward_function``: the reward the server stored for the rollout's episode (the verifier's).

    The session comes from ``extra_info`` (:func:`session_of`); ``solution_str`` and ``ground_truth`` are never read
    (the dataset carries a task reference, not the gold). The call ends the session (``DELETE``): a done episode
    answers its stored reward again; one verl cut short is ended as a scored episode (``turn_limit``, reward 0) and
    stored, not left to the reaper. A medgym row whose rollout never reached the environment (verl cut it before the
    first reply was sent) names no session and scores 0; its session, opened with no turn, is left to the reaper. The server is ``base_url`` (verl's
    ``custom_reward_function.reward_kwargs``) or $MEDGYM_URL; a row that is not medgym's is an error."""
    info = extra_info or {}
    sid = session_of(info)
    if sid is None:
        kw = info.get("interaction_kwargs") or {}
        if (data_source or "").startswith("medgym") or kw.get("name") == "medgym" or str(ground_truth or "").startswith("medgym://"):
            return 0.0
        raise ValueError(f"medgym: compute_score got a row that is not medgym's (data_source {data_source!r})")
    with Client(_adapt.base_url({"base_url": base_url}), token=_adapt.token({"token": token})) as client:
        closed = client.close_session(sid)
    return float(closed.get("reward") or 0.0)
