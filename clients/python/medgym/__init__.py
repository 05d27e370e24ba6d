"""medgym: the Python client of medgym's environment API (``medgym env serve``) and adapters for RL frameworks.

- :class:`medgym.Client`, :class:`medgym.AsyncClient`: the HTTP API (services/env/openapi.json).
- :mod:`medgym.gym`: ``MedGymEnv``, registered as ``medgym/MedGym-v0`` when :mod:`medgym.gym` is imported (or named
  in the id: ``gymnasium.make("medgym.gym:medgym/MedGym-v0")``).
- :mod:`medgym.trl`: the environment for TRL's ``GRPOTrainer(environment_factory=...)``.
- :mod:`medgym.skyrl` (SkyRL-gym ``BaseTextEnv``), the package ``medgym_verifiers`` shipped beside this one (verifiers
  0.4's taskset and env, taskset id ``medgym-verifiers``), :mod:`medgym.verl_agent` (a verl agent loop; :mod:`medgym.verl`
  its reward function) and ``medgym/openrlhf.py`` (OpenRLHF's agent file): each imports its framework only when
  imported itself.

Importing :mod:`medgym` imports httpx and nothing else: no framework, no registration (each adapter registers what
it registers when it is imported itself).

Ground truth never reaches the client: the server parses the model's replies with medgym's own parser, runs code in
medgym's sandbox, scores with medgym's verifier and stores every episode like any other run.
"""

from ._version import __version__
from .client import AsyncClient, AsyncSession, Client, Session, StepResult
from .errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    MedGymConnectionError,
    MedGymError,
    NotFoundError,
    RateLimitError,
    ServerError,
)

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "MedGymConnectionError",
    "MedGymError",
    "NotFoundError",
    "RateLimitError",
    "ServerError",
    "Session",
    "StepResult",
    "__version__",
]


def __getattr__(name: str):
    if name == "ConnectionError":  # the old name, which shadowed the builtin in `from medgym import *`
        from . import errors

        return errors.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

