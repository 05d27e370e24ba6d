"""medgym: the Python client of medgym's environment API (``medgym env serve``) and adapters for RL frameworks.

- :class:`medgym.Client`, :class:`medgym.AsyncClient`: the HTTP API (services/env/openapi.json).
- :mod:`medgym.gym`: ``MedGymEnv``, registered here as ``medgym/MedGym-v0`` when gymnasium is installed.
- :mod:`medgym.trl`: the environment for TRL's ``GRPOTrainer(environment_factory=...)``.
- :mod:`medgym.skyrl` (SkyRL-gym ``BaseTextEnv``), :mod:`medgym.verifiers_env` (verifiers ``MultiTurnEnv``;
  :func:`load_environment` here is its entry point), :mod:`medgym.verl` (verl ``BaseInteraction``) and
  ``medgym/openrlhf.py`` (OpenRLHF's agent file): each imports its framework only when imported itself.

Ground truth never reaches the client: the server parses the model's replies with medgym's own parser, runs code in
medgym's sandbox, scores with medgym's verifier and stores every episode like any other run.
"""

from .client import AsyncClient, AsyncSession, Client, Session, StepResult
from .errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionError,
    MedGymError,
    NotFoundError,
    RateLimitError,
    ServerError,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "ConnectionError",
    "MedGymError",
    "NotFoundError",
    "RateLimitError",
    "ServerError",
    "Session",
    "StepResult",
]


def _register_gym() -> None:
    try:
        import gymnasium  # noqa: F401
    except ImportError:  # the client works without gymnasium; only the Gymnasium adapter needs it
        return
    from .gym import register_envs

    register_envs()


_register_gym()


def load_environment(**kwargs):
    """The verifiers / prime-rl entry point, so ``verifiers.load_environment("medgym", base_url=..., dataset=...)``
    finds medgym: see :func:`medgym.verifiers_env.load_environment` (imports verifiers)."""
    from .verifiers_env import load_environment as _load

    return _load(**kwargs)
