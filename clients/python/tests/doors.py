"""What the door tests (test_door_openenv.py, test_door_mcp.py) share: a server under medgym's default rule (end_on
answer), a reference episode played under it by ``medgym run``, and the leak check (no gold answer of the task in a
response of an episode that never computed it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import DATASET, SPLIT, Server, play_reference, start_server, verifier_tree
from contract import load_truths


def default_rule_server(tmp: Path) -> Server:
    """A ``medgym env serve`` under medgym's default, RL-safe rule: only the answer action ends an episode (the
    suite's other servers take end_on both, conftest.LEGACY_RULE; the last --end-on wins)."""
    return start_server(tmp, "--end-on", "answer", checked=False)


def reference_row(tmp: Path) -> dict[str, Any]:
    """A TREQS train task played by ``medgym run --policy reference`` under the default rule: its stored row (a
    validate_code reply, then the answer)."""
    rows = play_reference(tmp, 1)
    assert rows[0]["outcome"] == "correct", rows
    return rows[0]


def replies(row: dict[str, Any]) -> list[str]:
    """The reference episode's replies, in order (raw action JSON)."""
    return [m["content"] for m in row["messages"] if m["role"] == "assistant"]


def assert_no_gold(task_id: str, responses: list[Any]) -> None:
    """No response holds a gold answer of task_id (as a token) or its gold SQL: for an episode that never ran the
    reference solution, any would be a leak."""
    secrets = load_truths(verifier_tree(), DATASET, SPLIT).get(task_id)
    assert secrets is not None and secrets.golds, f"no truth for {task_id} in the verifier tree"
    text = "\n".join(json.dumps(r, default=str) for r in responses)
    for gold, pat in secrets.golds:
        m = pat.search(text)
        assert m is None, f"gold answer {gold!r} in a response: …{text[max(0, m.start() - 80) : m.end() + 80]}…"
    for d in secrets.distinct:
        assert d not in text, "a task secret (gold SQL or reference solution) in a response"


def wrong_replies(task_id: str) -> list[str]:
    """An episode that never computes the answer: a code run printing nothing of it, then an answer no gold is."""
    secrets = load_truths(verifier_tree(), DATASET, SPLIT)[task_id]
    wrong = next(str(n) for n in range(-987654, 0) if not any(p.search(str(n)) for _, p in secrets.golds))
    return [
        json.dumps({"action": "validate_code", "params": {"code": "print('no answer here')"}}),
        json.dumps({"action": "answer", "params": {"answer": wrong}}),
    ]


def one_row(server: Server, run_id: str) -> dict[str, Any]:
    rows = server.rows(run_id)
    assert len(rows) == 1, f"run {run_id}: {len(rows)} stored rows, want 1"
    return rows[0]


@pytest.fixture(scope="module")
def door_server(tmp_path_factory: pytest.TempPathFactory):
    s = default_rule_server(tmp_path_factory.mktemp("doors"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def reference_default(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return reference_row(tmp_path_factory.mktemp("reference-default"))

