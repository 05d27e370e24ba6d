"""medgym.Client and AsyncClient against a live ``medgym env serve``."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import httpx
import pytest
from conftest import DATASET, SPLIT, prompt_of, reference_action, run_id

import medgym


def tool_call(action: dict) -> dict:
    return {"id": "call_0", "type": "function",
            "function": {"name": action["action"], "arguments": json.dumps(action["params"])}}  # fmt: skip


def test_tasks_pages(client):
    first = client.tasks(dataset=DATASET, split=SPLIT, limit=3)
    second = client.tasks(dataset=DATASET, split=SPLIT, limit=3, offset=3)
    assert len(first) == 3 and len(second) == 3
    assert not {t["id"] for t in first} & {t["id"] for t in second}
    assert all(t["dataset"] == DATASET and t["split"] == SPLIT for t in first + second)


def test_same_prompt_and_reward_as_medgym_run(server, client, reference):
    """A session's prompt is the prompt `medgym run` stored, and the reference reply scores the same, stored once."""
    rid = run_id("same")
    for row in reference:
        with client.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid) as s:
            assert s.messages == prompt_of(row)
            assert s.turn == 0
            r = s.step(json.dumps(reference_action(row)))  # raw content: medgym's parser on the server
            assert r.done and not r.truncated
            assert r.info["outcome"] == row["outcome"] == "correct"
            assert r.reward == row["reward"] == 1.0
            assert r.info["row"]["run_id"] == rid
            assert r.observation == next(m["content"] for m in row["messages"][len(s.messages) + 1 :])
    rows = server.rows(rid)
    assert sorted(r["task_id"] for r in rows) == [r["task_id"] for r in reference]
    assert [r["reward"] for r in rows] == [1.0, 1.0]


def test_tool_calls_map_onto_actions(server, client, reference):
    row = reference[0]
    rid = run_id("tools")
    s = client.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
    assert {t["function"]["name"] for t in s.tools} >= {"validate_code", "answer"}
    r = s.step(tool_calls=[tool_call(reference_action(row))])
    assert r.done and r.info["outcome"] == "correct" and r.info["action"] == "validate_code"
    closed = s.close()  # DELETE after done answers the stored result
    assert closed["done"] and closed["outcome"] == "correct" and closed["reward"] == 1.0


def test_errors_are_typed_with_the_servers_reason(client, reference):
    with pytest.raises(medgym.NotFoundError) as e:
        client.create_session("no-such-task", dataset=DATASET, split=SPLIT)
    assert e.value.status == 404 and e.value.code == "unknown_task" and "no-such-task" in e.value.message

    with pytest.raises(medgym.NotFoundError) as e:
        client.step("0123456789abcdef", 0, content="hi")
    assert e.value.code == "unknown_session"

    with pytest.raises(medgym.BadRequestError) as e:
        client.create_session(reference[0]["task_id"], dataset=DATASET, split=SPLIT, max_turns=0)
    assert e.value.status == 400 and e.value.message

    s = client.session(reference[0]["task_id"], dataset=DATASET, split=SPLIT, run_id=run_id("errors"))
    with pytest.raises(medgym.ConflictError) as e:
        s.client.step(s.id, 3, content="hi")  # a turn out of order
    assert e.value.code == "turn_out_of_order"
    with pytest.raises(medgym.BadRequestError) as e:
        s.client.step(s.id, 0, content="x" * (5 << 20))  # 5 MB: over the server's body limit
    assert e.value.status == 413
    s.step(json.dumps(reference_action(reference[0])))
    with pytest.raises(medgym.ConflictError) as e:
        s.step("another reply after done")
    assert e.value.code == "session_done" and "done" in e.value.message


def test_a_retried_step_is_answered_once(server, reference):
    """A lost reply: the proxy forwards the step, drops the server's answer; the client sends the same turn again
    and gets the stored answer; the code ran once (one row, one turn)."""
    row = reference[0]
    rid = run_id("retry")
    with LossyProxy(server.url, drop_replies_to=b"/step") as proxy, server.client(proxy.url, backoff=0.05) as c:
        s = c.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
        r = s.step(json.dumps(reference_action(row)))
        assert proxy.dropped == 1
        assert r.done and r.info["outcome"] == "correct" and r.info["turn"] == 0
        assert proxy.forwarded_steps == 2  # the first try and the retry, both with turn 0
    with server.client() as c:
        status = c.session_status(s.id)
    assert status["turn"] == 1 and status["done"]
    rows = server.rows(rid)
    assert len(rows) == 1 and rows[0]["num_turns"] == 1


def test_no_retry_without_a_server(reference):
    c = medgym.Client(f"http://127.0.0.1:{_closed_port()}", max_retries=2, backoff=0.01)
    with pytest.raises(medgym.MedGymConnectionError) as e:
        c.tasks()
    assert "ConnectError" in str(e.value)


def test_async_client_many_sessions(server, reference):
    rid = run_id("async")

    async def one(c: medgym.AsyncClient, row: dict) -> medgym.StepResult:
        async with await c.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid) as s:
            return await s.step(json.dumps(reference_action(row)))

    async def main() -> list[medgym.StepResult]:
        async with server.async_client() as c:
            return await asyncio.gather(*(one(c, reference[i % 2]) for i in range(6)))

    results = asyncio.run(main())
    assert [r.reward for r in results] == [1.0] * 6
    rows = server.rows(rid)
    assert len(rows) == 6
    assert sorted(r["sample_index"] for r in rows) == [0, 0, 1, 1, 2, 2]  # each task's samples 0, 1, 2


def test_openapi_document(client):
    doc = client.openapi()
    assert doc["openapi"].startswith("3.")
    assert {"/v1/tasks", "/v1/sessions", "/v1/sessions/{session_id}/step", "/v1/sessions/{session_id}"} <= set(doc["paths"])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LossyProxy:
    """A loopback HTTP/1.1 proxy, one request per connection, that forwards everything and drops the first reply to a
    request whose first line contains ``drop_replies_to`` (it closes the client's connection instead)."""

    def __init__(self, upstream: str, drop_replies_to: bytes) -> None:
        self.upstream = httpx.URL(upstream)
        self.pattern = drop_replies_to
        self.dropped = 0
        self.forwarded_steps = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "LossyProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            length = 0
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v.strip())
            while len(body) < length:
                body += conn.recv(65536)
            method, target, _ = lines[0].split(b" ", 2)
            headers = {
                k.strip().decode(): v.strip().decode()
                for k, _, v in (line.partition(b":") for line in lines[1:])
                if k.strip().lower() not in (b"host", b"content-length", b"connection")
            }
            resp = httpx.request(method.decode(), str(self.upstream.join(target.decode())), headers=headers, content=body)
            step = self.pattern in lines[0]
            if step:
                self.forwarded_steps += 1
            if step and self.dropped == 0:
                self.dropped += 1
                return  # the server executed the step; its answer never reaches the client
            out = resp.content
            hdr = f"HTTP/1.1 {resp.status_code} {resp.reason_phrase}\r\nContent-Type: application/json\r\n"
            hdr += "".join(f"{k}: {v}\r\n" for k, v in resp.headers.items() if k.lower() == "retry-after")
            hdr += f"Content-Length: {len(out)}\r\nConnection: close\r\n\r\n"
            conn.sendall(hdr.encode() + out)


def test_prompt_opens_no_session(server, client, reference):
    """GET /v1/tasks/{id}/prompt answers the prompt `medgym run` stored, opens no session and stores nothing; and
    prompt_dataset, built on it, leaves no abandoned rows."""
    from medgym.trl import prompt_dataset

    live = client.health()["live_sessions"]
    for row in reference:
        p = client.prompt(row["task_id"], dataset=DATASET, split=SPLIT)
        assert p["messages"] == prompt_of(row)
        assert p["task"]["id"] == row["task_id"]
        assert {t["function"]["name"] for t in p["tools"]} >= {"validate_code", "answer"}
    # Control: end_on reaches the prompt builder (no answer action when only accepted code ends an episode).
    accepted = client.prompt(reference[0]["task_id"], dataset=DATASET, split=SPLIT, end_on="accepted")
    assert "answer" not in {t["function"]["name"] for t in accepted["tools"]}
    with pytest.raises(medgym.NotFoundError) as e:
        client.prompt("no-such-task", dataset=DATASET, split=SPLIT)
    assert e.value.code == "unknown_task"

    rid = run_id("prompts")
    ids = [r["task_id"] for r in reference]
    ds = prompt_dataset(client, ids, dataset=DATASET, split=SPLIT, run_id=rid, options={"prompt_mode": "json"})
    assert [r["prompt"] for r in ds] == [prompt_of(r) for r in reference]
    # By default the dataset carries the tool-calling prompt (MedGymToolEnv's sessions run in tools mode).
    tools = prompt_dataset(client, ids, dataset=DATASET, split=SPLIT, run_id=rid)
    assert [r["prompt"] for r in tools] == [client.prompt(i, dataset=DATASET, split=SPLIT, prompt_mode="tools")["messages"] for i in ids]
    assert all("JSON" not in r["prompt"][0]["content"] for r in tools)
    with pytest.raises(medgym.BadRequestError):
        client.prompt(ids[0], dataset=DATASET, split=SPLIT, prompt_mode="xml")
    assert client.health()["live_sessions"] == live
    assert server.rows(rid) == [] and server.rows("prompts") == []
    doc = client.openapi()
    assert "/v1/tasks/{task_id}/prompt" in doc["paths"]


def test_close_scores_an_unfinished_episode(server, client, reference):
    """A session the client ends before done (DELETE: its own turn limit, the end of its rollout) is a scored episode:
    turn_limit, reward 0, truncated, stored with termination closed and kept with the run's rows; only the reaper
    stores an episode as abandoned (a client that vanished)."""
    rid = run_id("close")
    s = client.session(reference[0]["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
    r = s.step("not an action")
    assert not r.done and r.info["parse_error"]
    closed = s.close()
    assert closed["done"] and (closed["outcome"], closed["reward"]) == ("turn_limit", 0.0)
    assert s.close() is closed  # once
    rows = server.rows(rid)
    assert len(rows) == 1 and (rows[0]["outcome"], rows[0]["termination"], rows[0]["reward"]) == ("turn_limit", "closed", 0.0)


def test_verl_reward_function_reads_the_stored_reward(server, client, reference):
    """medgym.verl's compute_score (here without verl: medgym._reward, which medgym.verl exports) finds the episode
    through the session its turn scores name and answers the reward the server stored; a rollout cut short is ended
    there and then (scored 0 and stored, closed). The dataset's ground truth is a task reference it never reads."""
    from medgym._reward import TurnScore, compute_score

    rid = run_id("verl-reward")
    row = reference[0]
    ref = f"medgym://{DATASET}/{SPLIT}/{row['task_id']}"
    s = client.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
    r = s.step(json.dumps(reference_action(row)))
    assert r.done and r.reward == 1.0
    extra = {"interaction_kwargs": {"name": "medgym", "task_id": row["task_id"]}, "turn_scores": [TurnScore(r.reward, s.id)]}
    assert compute_score("medgym/treqs", "", ref, extra, base_url=server.url) == 1.0
    assert compute_score("medgym/treqs", "", "the gold is ignored", extra, base_url=server.url) == 1.0

    cut = client.session(reference[1]["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
    r = cut.step("not an action")
    assert not r.done
    extra = {"interaction_kwargs": {"name": "medgym"}, "turn_scores": [TurnScore(r.reward, cut.id)]}
    assert compute_score("medgym/treqs", "not an action", ref, extra, base_url=server.url) == 0.0
    rows = sorted(server.rows(rid), key=lambda x: x["reward"])
    assert [(x["outcome"], x["termination"]) for x in rows] == [("turn_limit", "closed"), ("correct", "accepted")]


def test_token_data_is_stored_and_junk_refused(server, client, reference):
    """A step's token data lands in its turn of the stored row as sent; token data the store could not keep as the
    llm-worker's path keeps it is a 400 before anything is played (the session stays at its turn)."""
    row = reference[0]
    rid = run_id("tokens")
    s = client.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid)
    for junk in (
        {"token_ids": [1, 2], "logprobs": [-0.5]},  # one logprob per id
        {"logprobs": [-0.5]},  # logprobs without their ids
        {"token_ids": [1, -2]},  # a negative id
        {"prompt_token_ids": [-1]},
        {"token_ids": [1], "logprobs": [0.5]},  # not a log-probability
        {"token_ids": [0] * 65537},  # over the cap
    ):
        with pytest.raises(medgym.BadRequestError):
            s.step(json.dumps(reference_action(row)), **junk)
    assert s.turn == 0 and client.session_status(s.id)["turn"] == 0
    sent = {"prompt_token_ids": [5, 6, 7], "token_ids": [11, 12, 13], "logprobs": [-0.25, -1.5, 0.0]}
    r = s.step(json.dumps(reference_action(row)), **sent)
    assert r.done and r.reward == 1.0
    (stored,) = server.rows(rid)
    t = stored["turns"][0]
    assert (t["prompt_token_ids"], t["completion_token_ids"], t["completion_logprobs"]) == tuple(sent.values())


def test_trl_env_registers_the_sessions_tools(server, client, reference):
    """MedGymToolEnv's tools are the server's for the dataset (TREQS: no terminal); an environment registering others
    is refused at reset, its session ended, not left open; the right one plays in tools mode."""
    from medgym.trl import MedGymToolEnv, tool_names

    names = tool_names(client, DATASET, split=SPLIT)
    assert "terminal" not in names and "validate_code" in names
    row = reference[0]
    rid = run_id("trl-tools")
    with pytest.raises(ValueError, match="offers the tools"):
        MedGymToolEnv(client, {"run_id": rid}).reset(task_id=row["task_id"], dataset=DATASET, split=SPLIT)
    env = MedGymToolEnv.with_actions(names)(client, {"run_id": rid})
    assert env.reset(task_id=row["task_id"], dataset=DATASET, split=SPLIT) is None
    assert "Each reply calls exactly one of the tools" in env._session.messages[0]["content"]
    assert not hasattr(env, "terminal") or env.terminal is None
    act = reference_action(row)
    assert act["action"] == "validate_code"
    env.validate_code(**act["params"])
    assert env.get_reward() == 1.0
    rows = server.rows(rid)
    assert sorted(r["outcome"] for r in rows) == ["correct", "turn_limit"]
