"""medgym on Prime Intellect's Environments Hub: ``load_environment`` is medgym's verifiers adapter's
(``medgym.verifiers_env``, in the ``medgym`` client package this one depends on), unchanged, so this package follows
the adapter: its arguments, its rows, its rubric (the verifier's reward). Episodes are played by a running medgym
environment server (``medgym env serve``, or the OpenEnv hub image: deploy/openenv), named by ``base_url`` or
``$MEDGYM_URL``; a token by ``token`` or ``$MEDGYM_TOKEN``.

    prime eval run medgym-env -m MODEL -a '{"base_url": "http://HOST:8420", "dataset": "medcalcbench", "split": "test"}'
"""

from __future__ import annotations

from typing import Any


def load_environment(**kwargs: Any):
    """The adapter's environment (a verifiers ``MultiTurnEnv``): see ``medgym.verifiers_env.load_environment``."""
    from medgym.verifiers_env import load_environment as load

    return load(**kwargs)
