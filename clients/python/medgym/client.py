"""HTTP clients of medgym's environment API (``medgym env serve``; contract: services/env/openapi.json).

:class:`Client` is synchronous, :class:`AsyncClient` is the same API with ``async`` methods (verl's and OpenRLHF's
hooks are async). Both speak the same requests, built once in :class:`_Protocol`:

- ``GET  /v1/tasks``                      :meth:`Client.tasks`
- ``POST /v1/sessions``                   :meth:`Client.create_session` (or :meth:`Client.session`)
- ``POST /v1/sessions/{id}/step``         :meth:`Client.step`
- ``DELETE /v1/sessions/{id}``            :meth:`Client.close_session`
- ``GET  /openapi.json``                  :meth:`Client.openapi`

Retries: a step carries its ``turn`` (the step's index in the episode) and the server answers a step it has already
executed with the stored answer, so a step is retried with the same turn after a lost reply, a 5xx or a 429 without
running twice. Creating a session is retried only when the server certainly did not create one (429, or no
connection made); listing tasks and fetching the document are always safe to retry.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from . import errors

__all__ = ["Client", "AsyncClient", "StepResult", "Session", "AsyncSession"]

# Retry classes of a request: what may be retried without changing what the server does.
_IDEMPOTENT = "idempotent"  # GET, and a step (the turn makes it idempotent)
_CREATE = "create"  # POST /v1/sessions: only when no session can have been made
_DELETE = "delete"  # DELETE: a repeat after a lost reply may answer 404


@dataclass
class StepResult:
    """What a step answers: ``observation`` (the text the model sees next), ``reward``, ``done``, ``truncated`` and
    ``info`` (``outcome``, ``action``, ``parse_error``, ``verdict``, ``turn``, and whatever the server adds)."""

    observation: str
    reward: float
    done: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "StepResult":
        return cls(
            observation=body.get("observation") or "",
            reward=float(body.get("reward") or 0.0),
            done=bool(body.get("done")),
            truncated=bool(body.get("truncated")),
            info=dict(body.get("info") or {}),
        )

    @property
    def outcome(self) -> str | None:
        """The episode's outcome once done (e.g. ``success``), else None."""
        return self.info.get("outcome")


@dataclass
class _Request:
    method: str
    path: str
    retry: str
    params: dict[str, Any] | None = None
    body: dict[str, Any] | None = None


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _ints(ids: Any) -> list[int] | None:
    """Token ids as JSON integers (a framework may hold them as a tensor, a tuple or numpy integers)."""
    if ids is None:
        return None
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    return [int(i) for i in ids]


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Protocol:
    """The requests and the answers' decoding, shared by Client and AsyncClient (no I/O here)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None,
        timeout: float,
        max_retries: int,
        backoff: float,
        max_backoff: float,
    ) -> None:
        if not base_url:
            raise ValueError("medgym: base_url is required (e.g. http://127.0.0.1:8700)")
        if max_retries < 0:
            raise ValueError(f"medgym: max_retries must be >= 0, got {max_retries}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": "medgym-python/0.1"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    # The requests -----------------------------------------------------------------------------------------------

    @staticmethod
    def _tasks(dataset: str | None, split: str | None, limit: int | None, offset: int | None) -> _Request:
        params = _drop_none({"dataset": dataset, "split": split, "limit": limit, "offset": offset})
        return _Request("GET", "/v1/tasks", _IDEMPOTENT, params=params)

    @staticmethod
    def _create(task_id: str, dataset: str | None, split: str | None, options: dict[str, Any]) -> _Request:
        if not task_id:
            raise ValueError("medgym: task_id is required")
        body: dict[str, Any] = _drop_none({"task_id": task_id, "dataset": dataset, "split": split})
        opts = _drop_none(options)
        if opts:
            body["options"] = opts
        return _Request("POST", "/v1/sessions", _CREATE, body=body)

    @staticmethod
    def _step(
        session_id: str,
        turn: int,
        content: str | None,
        tool_calls: list[dict[str, Any]] | None,
        token_ids: list[int] | None,
        logprobs: list[float] | None,
        usage: dict[str, Any] | None,
        prompt_token_ids: list[int] | None = None,
    ) -> _Request:
        if (content is None) == (tool_calls is None):
            raise ValueError("medgym: a step takes exactly one of content or tool_calls")
        body = _drop_none(
            {
                "turn": int(turn),
                "content": content,
                "tool_calls": tool_calls,
                "token_ids": _ints(token_ids),
                "prompt_token_ids": _ints(prompt_token_ids),
                "logprobs": None if logprobs is None else [float(x) for x in logprobs],
                "usage": usage,
            }
        )
        return _Request("POST", f"/v1/sessions/{_seg(session_id)}/step", _IDEMPOTENT, body=body)

    @staticmethod
    def _prompt(
        task_id: str, dataset: str | None, split: str | None, end_on: str | None, prompt_mode: str | None = None
    ) -> _Request:
        if not task_id:
            raise ValueError("medgym: task_id is required")
        params = _drop_none({"dataset": dataset, "split": split, "end_on": end_on, "prompt_mode": prompt_mode})
        return _Request("GET", f"/v1/tasks/{_seg(task_id)}/prompt", _IDEMPOTENT, params=params)

    @staticmethod
    def _status(session_id: str) -> _Request:
        return _Request("GET", f"/v1/sessions/{_seg(session_id)}", _IDEMPOTENT)

    @staticmethod
    def _health() -> _Request:
        return _Request("GET", "/healthz", _IDEMPOTENT)

    @staticmethod
    def _close(session_id: str) -> _Request:
        return _Request("DELETE", f"/v1/sessions/{_seg(session_id)}", _DELETE)

    @staticmethod
    def _openapi() -> _Request:
        return _Request("GET", "/openapi.json", _IDEMPOTENT)

    # Answers and retries ----------------------------------------------------------------------------------------

    def _decode(self, req: _Request, resp: httpx.Response) -> Any:
        """The JSON body of a 2xx answer; else raise the typed error with the server's reason."""
        url = f"{self.base_url}{req.path}"
        try:
            body: Any = resp.json() if resp.content else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if resp.is_success:
            if body is None and resp.content:
                raise errors.MedGymError(
                    f"answer is not JSON: {resp.text[:200]!r}", status=resp.status_code, method=req.method, url=url
                )
            return body
        code, message = None, None
        if isinstance(body, dict):
            err = body.get("error")
            if isinstance(err, dict):
                code, message = err.get("code"), err.get("message")
            elif isinstance(err, str):
                message = err
        if not message:
            message = resp.text[:500] or resp.reason_phrase or "no reason given"
        cls = errors.error_class(resp.status_code)
        kw: dict[str, Any] = dict(status=resp.status_code, code=code, method=req.method, url=url, body=body)
        if cls is errors.RateLimitError:
            kw["retry_after"] = _retry_after(resp)
        raise cls(message, **kw)

    def _should_retry(self, req: _Request, attempt: int, exc: Exception) -> float | None:
        """Seconds to wait before another attempt of req, or None when exc is final."""
        if attempt >= self.max_retries:
            return None
        delay = min(self.max_backoff, self.backoff * (2**attempt)) * (0.5 + random.random() / 2)
        if isinstance(exc, errors.RateLimitError):
            return exc.retry_after if exc.retry_after is not None else delay
        if isinstance(exc, httpx.ConnectError):
            return delay  # nothing reached the server: any request may be sent again
        if req.retry == _IDEMPOTENT and isinstance(exc, (httpx.TransportError, errors.ServerError)):
            return delay
        if req.retry == _DELETE and isinstance(exc, errors.ServerError) and exc.status in (502, 503, 504):
            return delay
        return None

    def _wrap_transport(self, req: _Request, exc: httpx.TransportError) -> errors.MedGymConnectionError:
        return errors.MedGymConnectionError(
            f"{type(exc).__name__}: {exc}", method=req.method, url=f"{self.base_url}{req.path}"
        )


def _seg(session_id: str) -> str:
    if not session_id or "/" in session_id:
        raise ValueError(f"medgym: bad session id {session_id!r}")
    return session_id


class Client(_Protocol):
    """Synchronous client of ``medgym env serve``.

    >>> c = Client("http://127.0.0.1:8700")
    >>> with c.session(c.tasks(dataset="medcalcbench", limit=1)[0]["id"]) as s:
    ...     r = s.step(content='{"action": "validate_code", "params": {"code": "print(1)"}}')
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url, token=token, timeout=timeout, max_retries=max_retries, backoff=backoff, max_backoff=max_backoff
        )
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=self._headers(), transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, req: _Request) -> Any:
        attempt = 0
        while True:
            try:
                resp = self._http.request(req.method, req.path, params=req.params, json=req.body)
                return self._decode(req, resp)
            except (httpx.TransportError, errors.MedGymError) as exc:
                wait = self._should_retry(req, attempt, exc)
                if wait is None:
                    if isinstance(exc, httpx.TransportError):
                        raise self._wrap_transport(req, exc) from exc
                    raise
            time.sleep(wait)
            attempt += 1

    def tasks(
        self, dataset: str | None = None, split: str | None = None, limit: int | None = None, offset: int | None = None
    ) -> list[dict[str, Any]]:
        """Task ids and their agent-visible views (never ground truth)."""
        return self._call(self._tasks(dataset, split, limit, offset))["tasks"]

    def create_session(
        self, task_id: str, *, dataset: str | None = None, split: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """Start an episode of task_id: ``{session_id, run_id, episode_id, task, messages, tools, turn, max_turns}``.
        dataset and split are needed only when the id is ambiguous. options (None values are left out): max_turns,
        end_on, verifier_mode, show_verdict, loop_guard, action_timeout_sec, episode_timeout_sec, compat, prompt_mode, seed,
        temperature, model, run_id, tags, reward, label_sets (e.g. ``["medcalcbench@v1.0"]``: the labels to score against)."""
        return self._call(self._create(task_id, dataset, split, options))

    def prompt(
        self,
        task_id: str,
        *,
        dataset: str | None = None,
        split: str | None = None,
        end_on: str | None = None,
        prompt_mode: str | None = None,
    ) -> dict[str, Any]:
        """``{task, messages, tools}``: what a session of task_id opens with under end_on (whether the answer
        action is offered) and prompt_mode (json or tools), built by the llm-worker's prompt builder; opens no session
        and stores nothing."""
        return self._call(self._prompt(task_id, dataset, split, end_on, prompt_mode))

    def session_status(self, session_id: str) -> dict[str, Any]:
        """The session as the server keeps it (turn, done, outcome, reward, messages, row, ...)."""
        return self._call(self._status(session_id))

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{status, live_sessions}``."""
        return self._call(self._health())

    def step(
        self,
        session_id: str,
        turn: int,
        *,
        content: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        token_ids: list[int] | None = None,
        logprobs: list[float] | None = None,
        usage: dict[str, Any] | None = None,
        prompt_token_ids: list[int] | None = None,
    ) -> StepResult:
        """Send the model's reply (raw ``content``, parsed by medgym's parser, or OpenAI ``tool_calls``). ``token_ids``
        (the completion's, as generated), ``logprobs`` (one per completion id) and ``prompt_token_ids`` (what the
        engine generated from) are stored in the turn, as the llm-worker stores a vLLM's."""
        req = self._step(session_id, turn, content, tool_calls, token_ids, logprobs, usage, prompt_token_ids)
        return StepResult.from_json(self._call(req))

    def close_session(self, session_id: str) -> dict[str, Any]:
        """End the episode (scored and stored if it is not done yet); the answer names the stored row."""
        return self._call(self._close(session_id))

    def openapi(self) -> dict[str, Any]:
        """The server's OpenAPI document."""
        return self._call(self._openapi())

    def session(self, task_id: str, **options: Any) -> "Session":
        """A new :class:`Session` of task_id (arguments as :meth:`create_session`) that counts its turns."""
        return Session(self, self.create_session(task_id, **options))


class AsyncClient(_Protocol):
    """:class:`Client` with ``async`` methods (one httpx.AsyncClient, safe to share between tasks)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 256,
    ) -> None:
        super().__init__(
            base_url, token=token, timeout=timeout, max_retries=max_retries, backoff=backoff, max_backoff=max_backoff
        )
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            headers=self._headers(),
            transport=transport,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=min(64, max_connections)),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _call(self, req: _Request) -> Any:
        attempt = 0
        while True:
            try:
                resp = await self._http.request(req.method, req.path, params=req.params, json=req.body)
                return self._decode(req, resp)
            except (httpx.TransportError, errors.MedGymError) as exc:
                wait = self._should_retry(req, attempt, exc)
                if wait is None:
                    if isinstance(exc, httpx.TransportError):
                        raise self._wrap_transport(req, exc) from exc
                    raise
            await asyncio.sleep(wait)
            attempt += 1

    async def tasks(
        self, dataset: str | None = None, split: str | None = None, limit: int | None = None, offset: int | None = None
    ) -> list[dict[str, Any]]:
        """See :meth:`Client.tasks`."""
        return (await self._call(self._tasks(dataset, split, limit, offset)))["tasks"]

    async def create_session(
        self, task_id: str, *, dataset: str | None = None, split: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """See :meth:`Client.create_session`."""
        return await self._call(self._create(task_id, dataset, split, options))

    async def prompt(
        self,
        task_id: str,
        *,
        dataset: str | None = None,
        split: str | None = None,
        end_on: str | None = None,
        prompt_mode: str | None = None,
    ) -> dict[str, Any]:
        """See :meth:`Client.prompt`."""
        return await self._call(self._prompt(task_id, dataset, split, end_on, prompt_mode))

    async def session_status(self, session_id: str) -> dict[str, Any]:
        """See :meth:`Client.session_status`."""
        return await self._call(self._status(session_id))

    async def health(self) -> dict[str, Any]:
        """See :meth:`Client.health`."""
        return await self._call(self._health())

    async def step(
        self,
        session_id: str,
        turn: int,
        *,
        content: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        token_ids: list[int] | None = None,
        logprobs: list[float] | None = None,
        usage: dict[str, Any] | None = None,
        prompt_token_ids: list[int] | None = None,
    ) -> StepResult:
        """See :meth:`Client.step`."""
        req = self._step(session_id, turn, content, tool_calls, token_ids, logprobs, usage, prompt_token_ids)
        return StepResult.from_json(await self._call(req))

    async def close_session(self, session_id: str) -> dict[str, Any]:
        """See :meth:`Client.close_session`."""
        return await self._call(self._close(session_id))

    async def openapi(self) -> dict[str, Any]:
        """See :meth:`Client.openapi`."""
        return await self._call(self._openapi())

    async def session(self, task_id: str, **options: Any) -> "AsyncSession":
        """See :meth:`Client.session`."""
        return AsyncSession(self, await self.create_session(task_id, **options))


class _SessionState:
    """One episode as the client sees it: the session's id, prompt and tools, the next turn, and the last answer."""

    def __init__(self, created: dict[str, Any]) -> None:
        self.id: str = created["session_id"]
        self.run_id: str | None = created.get("run_id")
        self.episode_id: str | None = created.get("episode_id")
        self.task: dict[str, Any] = dict(created.get("task") or {})
        self.messages: list[dict[str, Any]] = list(created.get("messages") or [])
        self.tools: list[dict[str, Any]] = list(created.get("tools") or [])
        self.created = created
        self.turn: int = int(created.get("turn") or 0)
        self.done = False
        self.closed: dict[str, Any] | None = None
        self.last: StepResult | None = None
        self.rewards: list[float] = []

    def _record(self, result: StepResult) -> StepResult:
        self.turn += 1
        self.last = result
        self.rewards.append(result.reward)
        self.done = result.done or result.truncated
        return result


class Session(_SessionState):
    """A live episode on a :class:`Client`; ``step`` sends the next turn. A context manager that closes it."""

    def __init__(self, client: Client, created: dict[str, Any]) -> None:
        super().__init__(created)
        self.client = client

    def step(self, content: str | None = None, *, tool_calls: list[dict[str, Any]] | None = None, **kw: Any) -> StepResult:
        return self._record(self.client.step(self.id, self.turn, content=content, tool_calls=tool_calls, **kw))

    def close(self) -> dict[str, Any]:
        """Score and store the episode (once; later calls return the first answer)."""
        if self.closed is None:
            self.closed = self.client.close_session(self.id)
        return self.closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncSession(_SessionState):
    """:class:`Session` on an :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient, created: dict[str, Any]) -> None:
        super().__init__(created)
        self.client = client

    async def step(
        self, content: str | None = None, *, tool_calls: list[dict[str, Any]] | None = None, **kw: Any
    ) -> StepResult:
        return self._record(await self.client.step(self.id, self.turn, content=content, tool_calls=tool_calls, **kw))

    async def close(self) -> dict[str, Any]:
        if self.closed is None:
            self.closed = await self.client.close_session(self.id)
        return self.closed

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
