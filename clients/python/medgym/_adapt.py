"""What the framework adapters share: where the server is, the session options a dataset row or a config names, and
which task a row plays. Nothing here parses a model's reply: the server does (medgym's own parser)."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

# The session options the API takes: every property of services/env/openapi.json's Options schema, in its order
# (tests/test_adapters_common.py fails when the two drift); anything else in a config is not sent.
OPTION_KEYS = (
    "max_turns",
    "end_on",
    "verifier_mode",
    "show_verdict",
    "loop_guard",
    "action_timeout_sec",
    "episode_timeout_sec",
    "compat",
    "prompt_mode",
    "seed",
    "temperature",
    "model",
    "run_id",
    "tags",
    "reward",
    "label_sets",
)

URL_ENV = "MEDGYM_URL"
TOKEN_ENV = "MEDGYM_TOKEN"
OPTIONS_ENV = "MEDGYM_OPTIONS"


def base_url(config: Mapping[str, Any] | None = None) -> str:
    """The server's URL: ``config["base_url"]``, else $MEDGYM_URL."""
    url = (config or {}).get("base_url") or os.environ.get(URL_ENV)
    if not url:
        raise ValueError(f"medgym: no server URL: pass base_url or set ${URL_ENV} (e.g. http://127.0.0.1:8700)")
    return str(url)


def token(config: Mapping[str, Any] | None = None) -> str | None:
    """The bearer token: ``config["token"]``, else $MEDGYM_TOKEN, else none."""
    return (config or {}).get("token") or os.environ.get(TOKEN_ENV) or None


def options(*sources: Mapping[str, Any] | None) -> dict[str, Any]:
    """Session options from $MEDGYM_OPTIONS (a JSON object), then each source in order (later ones win); only the
    API's option keys are kept."""
    out: dict[str, Any] = {}
    env = os.environ.get(OPTIONS_ENV)
    if env:
        parsed = json.loads(env)
        if not isinstance(parsed, dict):
            raise ValueError(f"medgym: ${OPTIONS_ENV} must be a JSON object, got {env!r}")
        out.update(parsed)
    for src in sources:
        out.update({k: v for k, v in (src or {}).items() if k in OPTION_KEYS and v is not None})
    return {k: v for k, v in out.items() if k in OPTION_KEYS}


def task_id(row: Mapping[str, Any]) -> str:
    """The task a dataset row of `medgym export` plays: its ``task_id``, else ``extra_info.task_id`` (verl's rows),
    else a ``medgym://dataset/split/id`` reference (verl's ``reward_model.ground_truth``, OpenRLHF's label)."""
    for v in (row.get("task_id"), (row.get("extra_info") or {}).get("task_id"), row.get("label")):
        if v:
            return ref_task_id(str(v))
    rm = row.get("reward_model") or {}
    if rm.get("ground_truth"):
        return ref_task_id(str(rm["ground_truth"]))
    raise ValueError(f"medgym: the row names no task (want task_id, extra_info.task_id or a medgym:// reference): keys {sorted(row)}")


def ref_task_id(v: str) -> str:
    """``medgym://dataset/split/id`` → ``id``; a plain id is returned as it is."""
    if v.startswith("medgym://"):
        parts = v[len("medgym://") :].split("/")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"medgym: malformed task reference {v!r} (want medgym://dataset/split/task_id)")
        return parts[2]
    return v
