"""NeMo Gym resources server over medgym's environment API (``nemo-gym`` 0.4.0; it needs Python >= 3.12).

NeMo Gym's agents (its ``simple_agent`` among them) drive a *resources server*: ``POST /seed_session`` with the
dataset row, then one ``POST /<tool name>`` per function call the model makes (the call's arguments as the body, the
response body as the tool's output), then ``POST /verify`` with the model's whole response, answered with a reward.
:class:`MedgymResourcesServer` is that server for medgym tasks: ``/seed_session`` opens a medgym session for the row's
``task_id`` (``prompt_mode: tools``), each of medgym's actions is a tool endpoint (``/validate_code``,
``/terminal``, ``/answer``; ``/request_info`` and ``/debug`` for tasks that permit them) that plays the next step
of that session, and ``/verify`` returns the verifier's reward of the episode (an unfinished one is closed first and
scores 0, as ``DELETE /v1/sessions/{id}`` scores it). The episode is stored like any medgym episode. NeMo Gym keeps
the session (its signed cookie); this server keeps only the map from it to the medgym session.

Run it as NeMo Gym runs resources servers: its config names the entry point (this module runs
``MedgymResourcesServer.run_webserver()`` when run as a script) and the server's settings::

    medgym_resources_server:
      resources_servers:
        medgym:
          entrypoint: <path of this file>
          medgym_url: http://127.0.0.1:8420
          domain: other

:func:`dataset_rows` writes the rows NeMo Gym's rollout collection reads (``responses_create_params`` with the
session's opening messages and the actions as Responses-API function tools, plus ``task_id``, ``dataset``, ``split``).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from .client import AsyncClient

#: medgym's actions, each a tool endpoint (only the task's permitted ones are offered to the model).
ACTIONS = ("validate_code", "terminal", "answer", "request_info", "debug")


class MedgymResourcesServerConfig(BaseResourcesServerConfig):
    """Where the environment API is, and the session options every seeded session gets."""

    medgym_url: str = "http://127.0.0.1:8420"
    medgym_token: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class MedgymSeedSessionRequest(BaseSeedSessionRequest):
    """The dataset row (extra fields, ``responses_create_params`` among them, are ignored)."""

    model_config = ConfigDict(extra="ignore")

    task_id: str
    dataset: str | None = None
    split: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class MedgymSeedSessionResponse(BaseSeedSessionResponse):
    session_id: str
    turn: int


class ToolOutput(BaseModel):
    """A tool call's output: the observation the model sees next, and whether the episode ended."""

    observation: str
    done: bool


class MedgymVerifyResponse(BaseVerifyResponse):
    outcome: str | None = None
    medgym_session_id: str | None = None


class MedgymResourcesServer(SimpleResourcesServer):
    config: MedgymResourcesServerConfig
    _sessions: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _client: AsyncClient | None = PrivateAttr(default=None)

    def medgym(self) -> AsyncClient:
        if self._client is None:
            self._client = AsyncClient(self.config.medgym_url, token=self.config.medgym_token)
        return self._client

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        for name in ACTIONS:
            app.post(f"/{name}")(self._tool(name))
        return app

    async def seed_session(self, request: Request, body: MedgymSeedSessionRequest) -> MedgymSeedSessionResponse:
        options = {"prompt_mode": "tools", **self.config.options, **body.options}
        s = await self.medgym().create_session(body.task_id, dataset=body.dataset, split=body.split, **options)
        self._sessions[request.session[SESSION_ID_KEY]] = {"id": s["session_id"], "turn": s["turn"], "done": False}
        return MedgymSeedSessionResponse(session_id=s["session_id"], turn=s["turn"])

    def _tool(self, name: str) -> Any:
        async def call(request: Request) -> ToolOutput:
            s = self._sessions.get(request.session.get(SESSION_ID_KEY, ""))
            if s is None:
                return ToolOutput(observation="Error: no medgym session: call /seed_session first.", done=True)
            if s["done"]:
                return ToolOutput(observation="The episode has ended.", done=True)
            try:
                args = await request.json()
            except ValueError:
                args = {}
            call = {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            r = await self.medgym().step(s["id"], s["turn"], tool_calls=[call])
            s["turn"] += 1
            s["done"] = r.done
            return ToolOutput(observation=r.observation, done=r.done)

        call.__name__ = name
        return call

    async def verify(self, request: Request, body: BaseVerifyRequest) -> MedgymVerifyResponse:
        s = self._sessions.pop(request.session.get(SESSION_ID_KEY, ""), None)
        if s is None:
            return MedgymVerifyResponse(**body.model_dump(), reward=0.0)
        status = await self.medgym().session_status(s["id"])
        if not status.get("done"):
            status = await self.medgym().close_session(s["id"])
        return MedgymVerifyResponse(
            **body.model_dump(),
            reward=float(status.get("reward") or 0.0),
            outcome=status.get("outcome"),
            medgym_session_id=s["id"],
        )


def responses_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session's OpenAI chat tools as Responses-API function tools (NeMo Gym's ``responses_create_params``)."""
    out = []
    for t in tools:
        f = t["function"]
        out.append(
            {
                "type": "function",
                "name": f["name"],
                "description": f.get("description", ""),
                "parameters": f.get("parameters", {}),
                "strict": False,
            }
        )
    return out


async def dataset_rows(
    client: AsyncClient, dataset: str, split: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """NeMo Gym dataset rows for a dataset's tasks: the prompt a session opens with, the actions as tools."""
    rows = []
    for task in await client.tasks(dataset=dataset, split=split, limit=limit):
        p = await client.prompt(task["id"], dataset=dataset, split=split, prompt_mode="tools")
        rows.append(
            {
                "responses_create_params": {"input": p["messages"], "tools": responses_tools(p["tools"])},
                "task_id": task["id"],
                "dataset": dataset,
                "split": split,
            }
        )
    return rows


if __name__ == "__main__":
    MedgymResourcesServer.run_webserver()
