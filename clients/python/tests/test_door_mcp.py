"""The MCP door (/mcp, Streamable HTTP) against the official MCP Python SDK's client (mcp 2.3.0,
requirements/env-mcp.txt): the tools it lists are the task's actions, with the session's JSON-schema parameters;
the reference replies as tool calls end the episode with the verifier's reward, stored as one row; an episode that
never computes the answer sees no gold answer in any result; /mcp?session_id= resumes a session. Skipped where mcp
is not installed (run by scripts/test-doors.sh in its venv)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from conftest import DATASET, run_id  # noqa: E402
from doors import assert_no_gold, door_server, one_row, reference_default, replies, wrong_replies  # noqa: E402,F401


def url(server, **query: str) -> str:
    return str(httpx.URL(server.url + "/mcp", params=query))


def test_mcp_client_plays_the_reference_episode(door_server, reference_default):
    """The tools are the session's tools (name, description, parameters), the instructions its opening messages;
    the reference replies as tool calls score the verifier's 1.0 (0 before done); one stored row; a call after the
    end is a tool error."""
    row, rid = reference_default, run_id("mcp")
    prompt = httpx.get(f"{door_server.url}/v1/tasks/{row['task_id']}/prompt", params={"dataset": DATASET}).json()

    async def main() -> None:
        async with Client(url(door_server, task_id=row["task_id"], run_id=rid)) as c:
            assert prompt["messages"][-1]["content"] in (c.instructions or "")
            tools = (await c.list_tools()).tools
            want = {t["function"]["name"]: t["function"] for t in prompt["tools"]}
            assert {t.name for t in tools} == set(want)
            for t in tools:
                assert t.description == want[t.name]["description"]
                assert t.input_schema == want[t.name]["parameters"]
            rewards = []
            for reply in replies(row):
                a = json.loads(reply)
                res = await c.call_tool(a["action"], a["params"])
                assert not res.is_error, res
                rewards.append(res.structured_content["reward"])
            assert res.structured_content["done"] and rewards == [0, 1.0]
            assert res.structured_content["info"]["outcome"] == "correct"
            again = await c.call_tool(a["action"], a["params"])
            assert again.is_error and "session_done" in again.content[0].text

    asyncio.run(main())
    assert one_row(door_server, rid)["reward"] == 1.0


def test_mcp_no_gold_in_any_result(door_server, reference_default):
    """An episode that never computed the answer reads no gold answer in the tools, the instructions or any result."""
    task, rid = reference_default["task_id"], run_id("mcp-wrong")

    async def main() -> list[Any]:
        async with Client(url(door_server, task_id=task, run_id=rid)) as c:
            seen: list[Any] = [c.instructions]
            seen += [t.model_dump() for t in (await c.list_tools()).tools]
            for reply in wrong_replies(task):
                a = json.loads(reply)
                seen.append((await c.call_tool(a["action"], a["params"])).model_dump())
            return seen

    seen = asyncio.run(main())
    assert seen[-1]["structured_content"]["done"] and seen[-1]["structured_content"]["reward"] == 0
    assert_no_gold(task, seen)
    assert one_row(door_server, rid)["reward"] == 0


def test_mcp_resume_by_session_id(door_server, reference_default):
    """A second MCP session with ?session_id= continues the first's episode at its turn; one row."""
    row, rid = reference_default, run_id("mcp-resume")
    first, second = replies(row)

    async def main() -> None:
        async with Client(url(door_server, task_id=row["task_id"], run_id=rid)) as c:
            a = json.loads(first)
            sid = (await c.call_tool(a["action"], a["params"])).structured_content["session_id"]
        async with Client(url(door_server, session_id=sid)) as c:
            a = json.loads(second)
            res = await c.call_tool(a["action"], a["params"])
            assert res.structured_content["done"] and res.structured_content["reward"] == 1.0
            assert res.structured_content["info"]["turn"] == 1

    asyncio.run(main())
    assert one_row(door_server, rid)["reward"] == 1.0
