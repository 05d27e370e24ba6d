"""verl adapter: the reward function (:func:`compute_score`) and, in :mod:`medgym.verl_agent`, the agent loop.

verl 0.8 removed interactions (``verl.interactions.BaseInteraction``, which medgym's adapter implemented up to verl
0.7) for agent loops: :class:`medgym.verl_agent.MedGymAgentLoop` plays each row as one medgym session and hands verl
the verifier's reward itself (``reward_score``, the batch's ``rm_scores``), so verl needs no reward function for
medgym's rows. :func:`compute_score` stays for a loop that does not score its rollouts (verl's own
``custom_reward_function``): it reads the reward the server stored for the session the rollout's turn scores name
(each a :class:`TurnScore`) and ends a session left open as a scored episode::

    reward.custom_reward_function.path=pkg://medgym.verl reward.custom_reward_function.name=compute_score

This module imports nothing from verl (the reward function runs wherever the client does).
"""

from __future__ import annotations

from ._reward import TurnScore, compute_score

__all__ = ["TurnScore", "compute_score"]
