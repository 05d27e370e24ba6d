"""A server killed mid-episode and a session its client left: each test starts its own ``medgym env serve`` (its own
state and store in tmp_path) and reads what it stored."""

from __future__ import annotations

import json
import signal
import time

import pytest
from conftest import DATASET, SPLIT, reference_action, run_id, start_server

import medgym


def code(src: str) -> str:
    """A validate_code reply running src."""
    return json.dumps({"action": "validate_code", "params": {"code": src}})


def test_a_killed_server_resumes_the_episode(tmp_path, reference):
    """SIGKILL after an acknowledged step; a server started again with the same command line (same port, --state and
    --store) continues the session: the last acknowledged turn, retried with another reply, answers what it answered
    before (its code does not run again), the next turn finishes the episode, and the episode is stored once with
    both turns and its outcome."""
    row = reference[0]
    rid = run_id("kill")
    probe = code("print('kill-probe-1')")
    srv = start_server(tmp_path)
    try:
        with srv.client() as c:
            s = c.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
            first = s.step(probe)
            assert not first.done and first.info["action"] == "validate_code"
            assert first.observation.startswith("kill-probe-1\n")

        srv.stop(signal.SIGKILL)
        assert srv.proc is not None and srv.proc.returncode == -signal.SIGKILL
        assert srv.rows(rid) == []  # mid-episode: nothing stored yet

        srv.start()
        with srv.client() as c:
            status = c.session_status(s.id)
            assert (status["turn"], status["done"], status.get("executing", False)) == (1, False, False)
            # The client never saw an answer it could trust (say): it retries turn 0 with another reply.
            again = c.step(s.id, 0, content=code("print('kill-probe-2')"))
            assert again == first
            last = c.step(s.id, 1, content=json.dumps(reference_action(row)))
            assert last.done and not last.truncated and last.reward == 1.0
            assert (last.info["turn"], last.info["outcome"]) == (1, "correct")
            assert c.step(s.id, 1, content=code("print('kill-probe-3')")) == last  # the last turn, retried
            with pytest.raises(medgym.ConflictError) as e:
                c.step(s.id, 2, content=probe)
            assert e.value.code == "session_done"
    finally:
        srv.stop()

    rows = srv.rows(rid)
    assert len(rows) == 1, [r["episode_id"] for r in rows]
    r = rows[0]
    assert (r["task_id"], r["outcome"], r["reward"], r["num_turns"]) == (row["task_id"], "correct", 1.0, 2)
    assert [t["index"] for t in r["turns"]] == [0, 1]
    assert [t["raw_text"] for t in r["turns"]] == [probe, json.dumps(reference_action(row))]
    assert r["turns"][0]["stdout"] == "kill-probe-1\n"  # turn 0 ran once, before the kill
    assert sum("kill-probe" in (t["stdout"] or "") for t in r["turns"]) == 1


def test_a_session_left_after_a_step_is_reaped(tmp_path, reference):
    """A server with a 1 s idle limit: a session stepped once and then left is reaped, stored as abandoned with its
    one turn; a later step gets 409 session_done (the document's Conflict), the retried turn 0 its stored answer."""
    row = reference[1]
    rid = run_id("reap")
    probe = code("print('reap-probe')")
    srv = start_server(tmp_path, "--idle", "1s", "--reap-every", "200ms")
    try:
        with srv.client() as c:
            s = c.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
            first = s.step(probe)
            assert not first.done and first.observation.startswith("reap-probe\n")

            # Left alone: wait on the store (not the API, which a poll would keep alive were reads to count).
            deadline = time.monotonic() + 30
            while not srv.rows(rid) and time.monotonic() < deadline:
                time.sleep(0.2)
            rows = srv.rows(rid)
            assert len(rows) == 1, "the idle session was not reaped and stored within 30 s"

            status = c.session_status(s.id)
            assert (status["done"], status["outcome"], status["turn"]) == (True, "abandoned", 1)
            with pytest.raises(medgym.ConflictError) as e:
                s.step(json.dumps(reference_action(row)))  # turn 1, after the reap
            assert e.value.status == 409 and e.value.code == "session_done" and "abandoned" in e.value.message
            assert c.step(s.id, 0, content=code("print('other')")) == first
            closed = s.close()
            assert closed["done"] and closed["outcome"] == "abandoned" and closed["reward"] == 0.0
    finally:
        srv.stop()

    rows = srv.rows(rid)
    assert len(rows) == 1
    r = rows[0]
    assert (r["task_id"], r["outcome"], r["reward"], r["num_turns"]) == (row["task_id"], "abandoned", 0.0, 1)
    assert [t["raw_text"] for t in r["turns"]] == [probe] and r["turns"][0]["stdout"] == "reap-probe\n"
    assert "reaped" in r["error"]
