"""The response checker every client of the suite talks through (contract.py) fails what it must: planted responses
that break the API's document, and bodies holding a task's gold answer, reach it through a fake inner transport
(httpx.MockTransport) in place of the server; and on the live server the canary has something to find."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from conftest import DATASET, ROOT, SPLIT, reference_action, run_id, verifier_tree
from contract import AsyncValidatingTransport, Contract, ContractError, ValidatingTransport, load_truths

import medgym

DOC_FILE = ROOT / "services" / "env" / "internal" / "httpapi" / "openapi.json"
BASE = "http://fake.invalid"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(DOC_FILE.read_text())


@pytest.fixture(scope="module")
def task() -> dict[str, Any]:
    """The first TREQS train task with a searchable gold answer: its verifier-tree line and that gold."""
    truths = load_truths(verifier_tree(), DATASET, SPLIT)
    with open(verifier_tree() / DATASET / f"{SPLIT}.jsonl", encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)
            sec = truths[t["view"]["id"]]
            if sec.golds and sec.distinct:
                return {**t, "gold": sec.golds[0][0], "sql": t["truth"]["extra"]["sql"]}
    pytest.fail("no TREQS task with a searchable gold answer in the verifier tree")


class Planted:
    """A fake server: answers each request with the response planted for (method, path), and counts requests."""

    def __init__(self, routes: dict[tuple[str, str], httpx.Response]) -> None:
        self.routes = routes
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        return self.routes[(request.method, request.url.path)]


def resp(status: int, body: Any = None, *, content: bytes | None = None, ctype: str = "application/json", **headers: str) -> httpx.Response:
    data = content if content is not None else json.dumps(body).encode()
    return httpx.Response(status, headers={"Content-Type": ctype, **{k.replace("_", "-"): v for k, v in headers.items()}}, content=data)


def err(code: str, message: str = "planted") -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


STEP_OK = {"observation": "", "reward": 0.0, "done": False, "truncated": False, "info": {"turn": 0, "action": ""}}
PAGE = {"tasks": [], "total": 0, "offset": 0, "next_offset": None}
STATUS = {"session_id": "s1", "run_id": "r", "episode_id": "e", "task_id": "t", "turn": 0, "done": False, "messages": [],
          "created_at": "2026-01-02T03:04:05.123456789Z", "last_seen": "2026-01-02T03:04:05Z"}  # fmt: skip

# (request, planted response, what the failure must say)
BREAKS = {
    "missing field": (("POST", "/v1/sessions/s1/step"), resp(200, {k: v for k, v in STEP_OK.items() if k != "done"}),
                      '$: "done" is a required property'),
    "wrong type": (("GET", "/v1/tasks"), resp(200, {**PAGE, "next_offset": "3"}), '$.next_offset: "3" is not of types'),
    "nested $ref": (("POST", "/v1/sessions/s1/step"), resp(200, {**STEP_OK, "info": {"turn": -1}}), "$.info.turn: -1 is less than the minimum of 0"),
    "status not documented": (("POST", "/v1/sessions/s1/step"), resp(418, err("bad_request")), "status 418 is not documented"),
    "server fault": (("GET", "/v1/tasks"), resp(500, err("internal")), "status 500 is a server fault"),
    "error code": (("DELETE", "/v1/sessions/s1"), resp(404, err("gone")), '$.error.code: "gone" is not one of'),
    "extra property": (("GET", "/v1/sessions/s1"), resp(404, {**err("unknown_session"), "hint": "x"}), "$: Additional properties are not allowed ('hint' was unexpected)"),
    "content type": (("GET", "/healthz"), resp(200, content=b"ok", ctype="text/plain"), "content type 'text/plain' is not one documented"),
    "not JSON": (("GET", "/healthz"), resp(200, content=b"{ok"), "the body is not JSON"),
    "date-time": (("GET", "/v1/sessions/s1"), resp(200, {**STATUS, "last_seen": "yesterday"}), '$.last_seen: "yesterday" is not a "date-time"'),
    "header": (("POST", "/v1/sessions"), resp(429, err("too_many_sessions"), Retry_After="soon"), "header Retry-After: 'soon' is not an integer"),
    "header minimum": (("POST", "/v1/sessions"), resp(503, err("unavailable"), Retry_After="0"), "header Retry-After: $: 0 is less than the minimum of 1"),
    "undocumented path": (("GET", "/v2/tasks"), resp(200, {}), "the document has no GET /v2/tasks"),
    "undocumented method": (("PUT", "/v1/tasks"), resp(405, {"oops": 1}), "the body is not the API's error body"),
}  # fmt: skip

CONFORMING = {
    "step": (("POST", "/v1/sessions/s1/step"), resp(200, STEP_OK)),
    "nullable null (3.1)": (("GET", "/v1/tasks"), resp(200, PAGE)),
    "nullable value": (("GET", "/v1/tasks"), resp(200, {**PAGE, "next_offset": 100})),
    "status": (("GET", "/v1/sessions/s1"), resp(200, STATUS)),
    "error": (("POST", "/v1/sessions/s1/step"), resp(409, err("turn_out_of_order"))),
    "429 with Retry-After": (("POST", "/v1/sessions"), resp(429, err("too_many_sessions"), Retry_After="2")),
    "undocumented path, 404": (("GET", "/v2/tasks"), resp(404, err("not_found"))),
    "document": (("GET", "/openapi.json"), resp(200, {"openapi": "3.1.0"})),
    "charset": (("GET", "/healthz"), resp(200, {"status": "ok"}, ctype="application/json; charset=utf-8")),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_a_response_that_breaks_the_document_fails(doc, case):
    (method, path), planted, why = BREAKS[case]
    contract = Contract(doc)
    fake = Planted({(method, path): planted})
    with httpx.Client(base_url=BASE, transport=ValidatingTransport(contract, inner=httpx.MockTransport(fake))) as c:
        with pytest.raises(ContractError) as e:
            c.request(method, path)
    msg = str(e.value)
    assert msg.startswith(f"{method} {path} → {planted.status_code}: "), msg
    assert why in msg, msg
    assert contract.failures == [msg]  # recorded too: a test that swallows the error still fails (conftest)


@pytest.mark.parametrize("case", sorted(CONFORMING))
def test_a_conforming_response_passes_intact(doc, case):
    (method, path), planted = CONFORMING[case]
    contract = Contract(doc)
    body = planted.content
    with httpx.Client(base_url=BASE, transport=ValidatingTransport(contract, inner=httpx.MockTransport(Planted({(method, path): planted})))) as c:
        got = c.request(method, path)
    assert (got.status_code, got.content, got.headers.get("retry-after")) == (planted.status_code, body, planted.headers.get("retry-after"))
    assert contract.failures == [] and [(x.method, x.path, x.status) for x in contract.exchanges] == [(method, path, planted.status_code)]


def test_medgym_clients_raise_it_without_retrying(doc):
    """Through medgym.Client and AsyncClient: the ContractError reaches the caller at once (the retry loop, which
    retries a step's 5xx, does not take it for a transport error)."""
    contract = Contract(doc)
    fake = Planted({("POST", "/v1/sessions/s1/step"): resp(500, {"error": "flat"})})
    with medgym.Client(BASE, transport=ValidatingTransport(contract, inner=httpx.MockTransport(fake)), backoff=0) as c:
        with pytest.raises(ContractError, match=r"POST /v1/sessions/s1/step → 500: status 500 is a server fault.*is not of type \"object\""):
            c.step("s1", 0, content="hi")
    assert fake.calls == 1

    async def run() -> None:
        inner = httpx.MockTransport(fake)
        async with medgym.AsyncClient(BASE, transport=AsyncValidatingTransport(contract, inner=inner), backoff=0) as c:
            await c.step("s1", 0, content="hi")

    with pytest.raises(ContractError, match=r"→ 500: status 500 is a server fault"):
        asyncio.run(run())
    assert fake.calls == 2 and len(contract.failures) == 2


def session_body(task: dict[str, Any], sid: str = "s1") -> dict[str, Any]:
    v = task["view"]
    return {"session_id": sid, "run_id": "r", "episode_id": "e", "task": v, "turn": 0, "max_turns": 15, "tools": [],
            "messages": [{"role": "system", "content": v["instruction"]}, {"role": "user", "content": v["question"]}]}  # fmt: skip


def play(contract: Contract, task: dict[str, Any], steps: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Create a session of task on a fake server, then send each step's content with the planted answer; the
    failures, one per step ('' where it passed)."""
    out: list[str] = []
    fake = Planted({("POST", "/v1/sessions"): resp(201, session_body(task))})
    with medgym.Client(BASE, transport=ValidatingTransport(contract, inner=httpx.MockTransport(fake))) as c:
        c.create_session(task["view"]["id"])
        for turn, (content, planted) in enumerate(steps):
            fake.routes[("POST", "/v1/sessions/s1/step")] = resp(200, {**STEP_OK, **planted, "info": {"turn": turn, **planted.get("info", {})}})
            try:
                c.step("s1", turn, content=content)
                out.append("")
            except ContractError as e:
                out.append(str(e))
    return out


def test_the_gold_answer_in_a_response_fails(doc, task):
    """The canary on the tasks the suite plays: a planted step answer whose server-written text holds the task's gold
    answer (from the verifier tree) fails; the same gold in the output of the agent's own code, or echoing the
    agent's own answer, passes; the gold SQL fails anywhere; a planted canary fails anywhere."""
    gold, sql = task["gold"], task["sql"]
    contract = Contract(doc, verifier=verifier_tree())
    probe = json.dumps({"action": "validate_code", "params": {"code": "print(1)"}})
    answer = json.dumps({"action": "answer", "params": {"answer": gold}})
    fails = play(contract, task, [
        (probe, {"info": {"action": "validate_code", "verdict": f"rejected: expected {gold}"}}),
        ("not an action", {"observation": f"Could not parse your reply. (The answer is {gold}.)", "info": {"parse_error": "no JSON"}}),
        (probe, {"observation": f"{gold}\n", "info": {"action": "validate_code"}}),  # the agent's code printed it
        (probe, {"observation": "1\n", "info": {"action": "validate_code", "verdict": "rejected", "row": {"run_id": "r", "episode_id": "e", "dataset": sql}}}),
        (answer, {"observation": f"You answered {gold}.", "info": {"action": "answer"}}),  # the agent's own answer
    ])  # fmt: skip
    assert f"the body holds the gold answer {gold!r} of task {task['view']['id']}" in fails[0], fails
    assert f"the body holds the gold answer {gold!r}" in fails[1], fails
    assert fails[2] == "", fails
    assert "the body holds the gold SQL or reference solution" in fails[3], fails
    assert fails[4] == "", fails

    # The prompt of the task, and the task in a page of tasks, with the gold in its question.
    leaky = {**task["view"], "question": f"{task['view']['question']} (hint: {gold})"}
    fake = Planted({("GET", f"/v1/tasks/{task['view']['id']}/prompt"): resp(200, {"task": leaky, "messages": [], "tools": []}),
                    ("GET", "/v1/tasks"): resp(200, {**PAGE, "tasks": [task["view"], leaky], "total": 2})})  # fmt: skip
    with httpx.Client(base_url=BASE, transport=ValidatingTransport(contract, inner=httpx.MockTransport(fake))) as c:
        for path in (f"/v1/tasks/{task['view']['id']}/prompt", "/v1/tasks"):
            with pytest.raises(ContractError, match=f"the body holds the gold answer '{gold}'"):
                c.get(path)

    # A planted canary: found anywhere, even in the agent's own output.
    contract.plant("MEDGYM-CANARY-planted")
    fails = play(contract, task, [(probe, {"observation": "MEDGYM-CANARY-planted\n", "info": {"action": "validate_code"}})])
    assert "the body holds the planted canary 'MEDGYM-CANARY-planted'" in fails[0], fails


def test_the_server_serves_this_document(server):
    """What every live response is checked against is the document in the repository (the one the Go tests use)."""
    assert server.contract is not None and server.contract.doc == json.loads(DOC_FILE.read_text())


def test_no_response_holds_the_gold_answer(server, client, reference):
    """Live: the TREQS tasks the suite plays have a gold answer the canary searches for (read from the verifier tree);
    a session answered wrongly with the verdict shown, its status and its close hold it nowhere (the hook checks
    each response); the positive control: the reference solution's output does hold it, where the hook knows it is
    the agent's own."""
    for row in reference:
        sec = server.contract.secrets(DATASET, SPLIT, row["task_id"])
        assert sec is not None and sec.golds and sec.distinct, f"no gold answer of {row['task_id']} to search for"
    rid = run_id("canary")
    row = reference[0]
    checked = len(server.contract.exchanges)
    s = client.session(row["task_id"], dataset=DATASET, split=SPLIT, run_id=rid, show_verdict=True)
    r = s.step("I am not sure.")
    assert not r.done and r.info["parse_error"]
    r = s.step(json.dumps({"action": "answer", "params": {"answer": "not the answer"}}))
    assert r.done and r.info["outcome"] == "incorrect"
    client.session_status(s.id)
    s.close()
    assert len(server.contract.exchanges) - checked == 5

    s = client.session(reference[1]["task_id"], dataset=DATASET, split=SPLIT, run_id=rid, show_verdict=True)
    r = s.step(json.dumps(reference_action(reference[1])))
    gold1, pattern1 = server.contract.secrets(DATASET, SPLIT, reference[1]["task_id"]).golds[0]
    assert r.info["outcome"] == "correct" and pattern1.search(r.observation), (gold1, r.observation)
    client.session_status(s.id)
