"""medgym on Prime Intellect's Environments Hub: a verifiers 0.4 environment package whose taskset and env are
medgym's verifiers adapter's (``medgym_verifiers``, in the ``medgym`` client distribution this package depends on),
re-exported unchanged, so this package follows the adapter: its config, its tasks, its episode and its reward (the
verifier's, from the server).

verifiers 0.4 loads an environment by its id: ``medgym-env`` (or the hub's ``OWNER/medgym-env[@VERSION]``) imports
this package, ``medgym_env``, and takes the ``Taskset`` and ``Env`` subclasses it exports through ``__all__``.
Episodes are played by a running medgym environment server (``medgym env serve``, or the OpenEnv hub image:
deploy/openenv), named by ``--env.taskset.base-url`` or ``$MEDGYM_URL``; a token by ``--env.taskset.token`` or
``$MEDGYM_TOKEN``::

    vf-eval medgym-env -n 5 -m MODEL --env.taskset.base-url http://HOST:8420 --env.taskset.dataset medcalcbench
"""

from medgym_verifiers import MedGymEnv, MedGymEnvConfig, MedGymTaskset, MedGymTasksetConfig

__all__ = ["MedGymEnv", "MedGymEnvConfig", "MedGymTaskset", "MedGymTasksetConfig"]
