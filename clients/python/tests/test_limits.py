"""The client against a server started with a bearer token and a cap of one live session: AuthenticationError
without the token, RateLimitError with the server's Retry-After at the cap, and a create retried after it."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import DATASET, SPLIT, run_id, start_server

import medgym

TOKEN = "pytest-token-7f3a"


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("capped"), "--max-sessions", "1", env={"MEDGYM_ENV_TOKEN": TOKEN})
    yield s
    s.stop()


def test_bearer_token(capped, reference):
    with capped.client() as c, pytest.raises(medgym.AuthenticationError) as e:
        c.tasks(dataset=DATASET)
    assert e.value.status == 401 and e.value.code == "unauthorized"
    with capped.client(token="wrong") as c, pytest.raises(medgym.AuthenticationError):
        c.tasks(dataset=DATASET)
    with capped.client(token=TOKEN) as c:
        assert c.tasks(dataset=DATASET, limit=1)


def test_cap_answers_429_and_a_create_is_retried(capped, reference):
    c = capped.client(token=TOKEN, max_retries=0)
    rid = run_id("cap")
    first = c.session(reference[0]["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
    with pytest.raises(medgym.RateLimitError) as e:
        c.create_session(reference[1]["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
    assert e.value.status == 429 and e.value.code == "too_many_sessions"
    assert e.value.retry_after is not None and e.value.retry_after >= 0

    # A client that retries gets its session once the first one ends.
    patient = capped.client(token=TOKEN, max_retries=20, backoff=0.05, max_backoff=0.5)
    closer = threading.Timer(0.5, first.close)
    closer.start()
    t0 = time.monotonic()
    second = patient.session(reference[1]["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
    closer.join()
    assert second.id != first.id and time.monotonic() - t0 >= 0.4
    second.close()
    c.close()
    patient.close()
    assert len(capped.rows(rid)) == 2
