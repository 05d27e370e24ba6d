"""Every response the tests receive, checked against the server's OpenAPI document (and searched for gold answers).

:class:`Contract` is the document served at /openapi.json as a response checker: each response's status must be one
the operation documents (a path or method the document lacks must answer 401, 404 or 405 with the API's error body,
and no 5xx but 503 and 504, which are retry signals, may appear: a 500 is a server fault), its content type one the
status documents, its JSON body valid under the status's schema (JSON Schema 2020-12, as OpenAPI 3.1 has it: a
nullable field is ``"type": [..., "null"]``; ``$ref`` resolved against the document's components; formats such as
date-time asserted) and each documented header it carries valid under the header's schema. The validator is
jsonschema_rs (requirements/env-base.txt; schemathesis validates with it too). :class:`ValidatingTransport` and
:class:`AsyncValidatingTransport` wrap httpx's transports (or any inner one: a test plants a response through
``httpx.MockTransport``) and run every response through a Contract before the client sees it; one that does not match
raises :class:`ContractError` (an AssertionError: the client's retry loop does not catch it) naming the method, path,
status and reason, and is recorded, so a test that swallowed the error still fails (conftest's autouse check).

The same hook is the suite's canary (the Go side's is systemtest/env_test.go's ``checkContract``): a Contract given
the library's verifier tree learns from each session it sees (the create answer names the task) which task it plays,
reads that task's truth from the verifier tree (``<library>/verifier/<dataset>/<split>.jsonl``, a line ``{"view",
"truth": {"answer", "values", "extra": {"sql"}}, "reference"}``) and fails any response about the session, the
task's prompt or a page listing the task that holds

- a gold answer (the truth's answer and values) as a whole token (17 is not found in 2017 or 1.75) in the text a model
  is shown: messages, observations, verdicts, parse errors, error messages, task views, tool descriptions. Ids,
  times, paths and rows are not searched (a "17" occurs in a timestamp or a hex id by chance), nor what the agent's
  own work returned (the observation of a step that ran code, looked data up or asked the debugger, and that message
  in the session's messages: the reference solution prints the answer), nor a gold the client itself sent (an answer
  action echoed), nor a gold the task's public view already holds as a token ("(1) DEMOGRAPHIC" for an answer 1);
- the gold SQL or the reference solution, anywhere in the body (but in what the client sent);
- a planted canary (:meth:`Contract.plant`), anywhere in the body, nothing left out.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

import httpx
import jsonschema_rs

DOC_URI = "urn:medgym:env:openapi.json"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# Statuses a path or method the document lacks may answer (with the API's error body).
UNDOCUMENTED_OK = (401, 404, 405)
# 5xx statuses that are not faults: retry signals the document declares (the bus is away; a step still executing).
RETRY_5XX = (503, 504)
# Actions whose observation is what the agent's own work returned (its code's output, the data it looked up, the
# debugger's advice): it may hold an answer the agent computed.
DATA_ACTIONS = frozenset({"validate_code", "terminal", "request_info", "debug"})


class ContractError(AssertionError):
    """A response that does not match the API's document (or holds a task's gold answer)."""


def _pointer_escape(s: str) -> str:
    return s.replace("~", "~0").replace("/", "~1")


def _pointer(doc: Any, ref: str) -> Any:
    if not ref.startswith("#/"):
        raise ValueError(f"only local references are supported: {ref}")
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


@dataclass
class Exchange:
    method: str
    path: str
    status: int
    body: bytes


@dataclass
class _Op:
    method: str
    template: str
    pattern: re.Pattern[str]
    pointer: str  # JSON pointer of the operation in the document
    op: dict[str, Any]


class Contract:
    """A response checker over an OpenAPI 3.1 document (see the module's doc). Thread safe."""

    def __init__(self, doc: dict[str, Any], verifier: Path | None = None) -> None:
        if not str(doc.get("openapi", "")).startswith("3.1"):
            raise ValueError(f"want an OpenAPI 3.1 document, got openapi={doc.get('openapi')!r}")
        self.doc = doc
        self.verifier = verifier
        self._registry = jsonschema_rs.Registry([(DOC_URI, doc)], draft=jsonschema_rs.Draft202012)
        self._validators: dict[str, jsonschema_rs.Draft202012Validator] = {}
        self._ops: list[_Op] = []
        for template, item in doc.get("paths", {}).items():
            regex = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
            for m in METHODS:
                if m in item:
                    ptr = f"/paths/{_pointer_escape(template)}/{m}"
                    self._ops.append(_Op(m.upper(), template, re.compile(regex), ptr, item[m]))
        # Literal paths before templated ones (/v1/tasks/x never shadows a literal).
        self._ops.sort(key=lambda o: o.template.count("{"))
        self._lock = threading.Lock()
        self.exchanges: list[Exchange] = []
        self.failures: list[str] = []
        self._sessions: dict[str, tuple[str, str, str]] = {}  # session id -> (dataset, split, task id)
        self._sent: dict[str, list[str]] = {}  # session id -> strings the client sent in it
        self._planted: list[str] = []
        self._truths: dict[tuple[str, str], dict[str, Secrets]] = {}

    # The canary ----------------------------------------------------------------------------------------------------

    def plant(self, canary: str) -> None:
        """Fail every later response that holds canary (wherever it is, the agent's output included)."""
        with self._lock:
            self._planted.append(canary)

    def secrets(self, dataset: str, split: str, task_id: str) -> Secrets | None:
        """The task's Secrets from the verifier tree (None without one, or for a task it does not hold)."""
        if self.verifier is None:
            return None
        key = (dataset, split)
        with self._lock:
            truths = self._truths.get(key)
        if truths is None:
            truths = load_truths(self.verifier, dataset, split)
            with self._lock:
                self._truths[key] = truths
        return truths.get(task_id)

    # Checking --------------------------------------------------------------------------------------------------------

    def operation(self, method: str, path: str) -> _Op | None:
        for op in self._ops:
            if op.method == method and op.pattern.match(path):
                return op
        return None

    def _validator(self, pointer: str) -> jsonschema_rs.Draft202012Validator:
        """The validator of the schema at pointer in the document (its $refs resolved against the document), with
        formats (date-time) asserted."""
        v = self._validators.get(pointer)
        if v is None:
            v = jsonschema_rs.Draft202012Validator(
                {"$ref": f"{DOC_URI}#{quote(pointer, safe='/~')}"}, registry=self._registry, validate_formats=True
            )
            with self._lock:
                self._validators[pointer] = v
        return v

    def _schema_errors(self, pointer: str, instance: Any) -> list[str]:
        errs = sorted(self._validator(pointer).iter_errors(instance), key=lambda e: [str(p) for p in e.instance_path])
        return [f"{_json_path(e.instance_path)}: {e.message}" for e in errs[:5]]

    def _response(self, op: _Op, status: int) -> tuple[str, dict[str, Any]] | None:
        """The documented response of op for status (exact code, then 4XX-style range, then default): its pointer
        and the response object, its $ref resolved."""
        responses = op.op.get("responses", {})
        for key in (str(status), f"{status // 100}XX", "default"):
            if key in responses:
                ptr = f"{op.pointer}/responses/{key}"
                r = responses[key]
                while "$ref" in r:
                    ptr = r["$ref"][1:]
                    r = _pointer(self.doc, r["$ref"])
                return ptr, r
        return None

    def check(
        self, method: str, path: str, status: int, headers: httpx.Headers, body: bytes, request_body: bytes = b""
    ) -> None:
        """Validate one response and search it for gold answers; record it; raise ContractError when it fails."""
        reasons: list[str] = []
        parsed: Any = None
        try:
            parsed = json.loads(body) if body else None
            is_json = bool(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            is_json = False
        if status >= 500 and status not in RETRY_5XX:
            reasons.append(f"status {status} is a server fault")
        op = self.operation(method, path)
        if op is None:
            if status not in UNDOCUMENTED_OK:
                reasons.append(f"the document has no {method} {path}: want 401, 404 or 405, got {status}")
            errs = self._schema_errors("/components/schemas/Error", parsed) if is_json else ["not JSON"]
            if errs:
                reasons.append("the body is not the API's error body: " + "; ".join(errs))
        else:
            reasons += self._check_op(op, status, headers, body, parsed, is_json)
        reasons += self._search(method, path, status, body, parsed, request_body)
        with self._lock:
            self.exchanges.append(Exchange(method, path, status, body))
            if reasons:
                msg = f"{method} {path} → {status}: " + "; ".join(reasons) + f" (body {body[:300]!r})"
                self.failures.append(msg)
        if reasons:
            raise ContractError(msg)

    def _check_op(
        self, op: _Op, status: int, headers: httpx.Headers, body: bytes, parsed: Any, is_json: bool
    ) -> list[str]:
        found = self._response(op, status)
        if found is None:
            documented = ", ".join(op.op.get("responses", {}))
            return [f"status {status} is not documented for {op.method} {op.template} (documented: {documented})"]
        ptr, resp = found
        reasons = []
        content = resp.get("content")
        if not content:
            if body:
                reasons.append(f"status {status} documents no body, got {len(body)} bytes")
        else:
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype not in content:
                reasons.append(f"content type {ctype or '(none)'!r} is not one documented ({', '.join(content)})")
            elif ctype.endswith("json"):
                if not is_json:
                    reasons.append("the body is not JSON")
                elif "schema" in content[ctype]:
                    sptr = f"{ptr}/content/{_pointer_escape(ctype)}/schema"
                    errs = self._schema_errors(sptr, parsed)
                    if errs:
                        name = _schema_name(content[ctype]["schema"], sptr)
                        reasons.append(f"the body does not match {name}: " + "; ".join(errs))
        for name, h in resp.get("headers", {}).items():
            hptr = f"{ptr}/headers/{_pointer_escape(name)}"
            while "$ref" in h:
                hptr = h["$ref"][1:]
                h = _pointer(self.doc, h["$ref"])
            value = headers.get(name)
            if value is None:
                if h.get("required"):
                    reasons.append(f"the required header {name} is missing")
                continue
            schema = h.get("schema", {})
            v: Any = value
            if schema.get("type") in ("integer", "number"):
                try:
                    v = int(value) if schema["type"] == "integer" else float(value)
                except ValueError:
                    reasons.append(f"header {name}: {value!r} is not an {schema['type']}")
                    continue
            errs = self._schema_errors(f"{hptr}/schema", v)
            if errs:
                reasons.append(f"header {name}: " + "; ".join(errs))
        return reasons

    def _search(self, method: str, path: str, status: int, body: bytes, parsed: Any, request_body: bytes) -> list[str]:
        """The gold answers and canaries found in the body (see the module's doc for what is searched where)."""
        parts = path.strip("/").split("/")
        sid = parts[2] if len(parts) >= 3 and parts[:2] == ["v1", "sessions"] else None
        if method == "POST" and path.rstrip("/") == "/v1/sessions" and status == 201 and isinstance(parsed, dict):
            sid = str(parsed.get("session_id"))
            with self._lock:
                self._sessions[sid] = _key(parsed.get("task") or {})
                self._sent[sid] = []  # the model's replies (step bodies), not the create's options
        elif sid is not None and request_body:
            with self._lock:
                if sid in self._sent:
                    self._sent[sid].extend(_sent_strings(_loads(request_body)))
        # (task, the part of the body about it): a session's or a prompt's whole body, each entry of a page of tasks.
        units: list[tuple[tuple[str, str, str], Any]] = []
        if sid is not None:
            with self._lock:
                key = self._sessions.get(sid)
            if key is not None:
                units.append((key, parsed))
        elif isinstance(parsed, dict) and isinstance(parsed.get("task"), dict):  # a task's prompt
            units.append((_key(parsed["task"]), parsed))
        elif isinstance(parsed, dict) and isinstance(parsed.get("tasks"), list):  # a page of tasks
            units += [(_key(t), t) for t in parsed["tasks"] if isinstance(t, dict)]
        with self._lock:
            planted = list(self._planted)
            sent = list(self._sent.get(sid, [])) if sid else []
        reasons = []
        if planted:  # in the raw bytes and in the decoded strings (a JSON escape may hide it from one of them)
            everything = list(_strings(parsed))
            reasons += [
                f"the body holds the planted canary {c!r}"
                for c in planted
                if c.encode() in body or any(c in x for x in everything)
            ]
        for (ds, sp, tid), part in units:
            sec = self.secrets(ds, sp, tid)
            if sec is None:
                continue
            visible = list(_visible(part))
            for g, pat in sec.golds:
                if any(pat.search(x) for x in sent):
                    continue  # the client sent it (an answer action, code that prints it): an echo is not a leak
                hit = next((x for x in visible if pat.search(x)), None)
                if hit is not None:
                    i = pat.search(hit).start()
                    where = hit[max(0, i - 80) : i + 80]
                    reasons.append(f"the body holds the gold answer {g!r} of task {tid} ({ds}/{sp}): ...{where!r}...")
            every = [x for x in _strings(part) if x not in sent]
            for d in sec.distinct:
                if not any(d in x for x in sent) and any(d in x for x in every):
                    reasons.append(
                        f"the body holds the gold SQL or reference solution of task {tid} ({ds}/{sp}): {d[:80]!r}..."
                    )
        return reasons


def _key(view: dict[str, Any]) -> tuple[str, str, str]:
    return str(view.get("dataset", "")), str(view.get("split", "")), str(view.get("id", ""))


def _json_path(path: list[str | int]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _schema_name(schema: dict[str, Any], pointer: str) -> str:
    return schema["$ref"].rsplit("/", 1)[-1] if "$ref" in schema else "#" + pointer


def _loads(b: bytes) -> Any:
    try:
        return json.loads(b)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return b.decode("utf-8", "replace")


def _strings(x: Any) -> Iterable[str]:
    """Every string in a JSON value (keys and values; numbers and booleans as JSON)."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)
    elif x is not None:
        yield json.dumps(x)


def _sent_strings(x: Any, depth: int = 0) -> list[str]:
    """The string values of a request body, and those of the JSON texts among them (a reply's action JSON, a tool
    call's arguments), a few levels down."""
    out: list[str] = []
    if isinstance(x, dict):
        for v in x.values():
            out += _sent_strings(v, depth)
    elif isinstance(x, list):
        for v in x:
            out += _sent_strings(v, depth)
    elif isinstance(x, str):
        out.append(x)
        if depth < 3 and x.lstrip()[:1] in ("{", "["):
            try:
                out += _sent_strings(json.loads(x), depth + 1)
            except json.JSONDecodeError:
                pass
    return out


# The keys of a body whose string values are text a model is shown (or the server's own words about a turn).
VISIBLE = frozenset(
    {"content", "observation", "verdict", "parse_error", "message", "question", "instruction", "context", "description",
     "category"}
)  # fmt: skip


def _visible(x: Any) -> Iterable[str]:
    """The model-facing text of a body: messages, observations, verdicts, parse errors, error messages, task views
    and tool descriptions; not ids, times, paths or rows. Left out: what the agent's own data actions returned (the
    observation of a step whose action ran code, looked data up or asked the debugger, and the user message after
    such a reply among a session's messages): the agent may compute or look up the answer."""
    if isinstance(x, dict):
        info = x.get("info")
        skip_obs = isinstance(info, dict) and info.get("action") in DATA_ACTIONS
        for k, v in x.items():
            if k == "observation" and skip_obs:
                continue
            if k == "messages" and isinstance(v, list):
                after_data = False
                for m in v:
                    if not isinstance(m, dict):
                        continue
                    role, content = m.get("role"), m.get("content")
                    if role == "user" and after_data:
                        after_data = False
                        continue
                    after_data = role == "assistant" and _data_action(content if isinstance(content, str) else "")
                    if isinstance(content, str):
                        yield content
                continue
            if k in VISIBLE and isinstance(v, str):
                yield v
            else:
                yield from _visible(v)
    elif isinstance(x, list):
        for v in x:
            yield from _visible(v)


def _data_action(reply: str) -> bool:
    """Whether an assistant reply is a data action (medgym's action JSON, which a tool call is re-serialised to)."""
    m = re.search(r'"action"\s*:\s*"([a-z_]+)"', reply or "")
    return bool(m) and m.group(1) in DATA_ACTIONS


def gold_pattern(g: str) -> re.Pattern[str]:
    """g as a whole token: not inside a word or a longer number (17 is not found in 2017, 1.75, x17 or 17.5)."""
    return re.compile(r"(?<![A-Za-z0-9_])(?<!\d\.)" + re.escape(g) + r"(?![A-Za-z0-9_])(?!\.\d)")


@dataclass
class Secrets:
    """What of a task must never reach a model: its gold answers (each with its token pattern) and its distinctive
    secrets (the gold SQL, the reference solution)."""

    golds: list[tuple[str, re.Pattern[str]]]
    distinct: list[str]


def load_truths(verifier: Path, dataset: str, split: str) -> dict[str, Secrets]:
    """task id → its Secrets, from the verifier tree's task file of dataset/split ({} when there is none). A gold
    that the task's public view already holds as a token is left out (the view gives it away legitimately: "(1)
    DEMOGRAPHIC" for an answer 1)."""
    f = verifier / dataset / f"{split}.jsonl"
    out: dict[str, Secrets] = {}
    if not f.is_file():
        return out
    with open(f, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            t = json.loads(line)
            view, truth = t.get("view") or {}, t.get("truth") or {}
            public = " ".join(str(view.get(k) or "") for k in ("question", "instruction", "context", "category"))
            golds = {str(g).strip() for g in [truth.get("answer") or ""] + list(truth.get("values") or [])} - {""}
            pats = [(g, gold_pattern(g)) for g in sorted(golds)]
            distinct = [d for d in ((truth.get("extra") or {}).get("sql"), t.get("reference")) if d and len(d) >= 20]
            out[view["id"]] = Secrets([(g, p) for g, p in pats if not p.search(public)], distinct)
    return out


class ValidatingTransport(httpx.BaseTransport):
    """An httpx transport that checks every response of ``inner`` (an httpx.HTTPTransport by default) against a
    Contract before handing it on, its body intact."""

    def __init__(self, contract: Contract, inner: httpx.BaseTransport | None = None) -> None:
        self.contract = contract
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = self.inner.handle_request(request)
        try:
            raw: bytes | None = b"".join(resp.iter_raw())
        except httpx.StreamConsumed:
            raw = None  # a response made with its content (httpx.MockTransport's): read already
        finally:
            resp.close()
        return _checked(self.contract, request, resp, raw)

    def close(self) -> None:
        self.inner.close()


class AsyncValidatingTransport(httpx.AsyncBaseTransport):
    """:class:`ValidatingTransport` for httpx.AsyncClient (inner: an httpx.AsyncHTTPTransport by default)."""

    def __init__(self, contract: Contract, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.contract = contract
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self.inner.handle_async_request(request)
        try:
            raw: bytes | None = b"".join([chunk async for chunk in resp.aiter_raw()])
        except httpx.StreamConsumed:
            raw = None
        finally:
            await resp.aclose()
        return _checked(self.contract, request, resp, raw)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _checked(contract: Contract, request: httpx.Request, resp: httpx.Response, raw: bytes | None) -> httpx.Response:
    """Check resp (its raw bytes read, or None when it was read already) and return a response with the same body."""
    headers = resp.headers
    if raw is None:
        body = resp.content  # decoded already: hand it on without its Content-Encoding
        headers = httpx.Headers([(k, v) for k, v in resp.headers.multi_items() if k.lower() != "content-encoding"])
        raw = body
    else:
        # The decoded body (Content-Encoding undone) is checked; the client gets the raw bytes and decodes them.
        body = httpx.Response(resp.status_code, headers=headers, stream=httpx.ByteStream(raw)).read()
    try:
        sent = request.content
    except httpx.RequestNotRead:
        sent = b""
    contract.check(request.method, request.url.path, resp.status_code, headers, body, sent)
    return httpx.Response(
        resp.status_code, headers=headers, stream=httpx.ByteStream(raw), extensions=resp.extensions, request=request
    )


__all__ = [
    "AsyncValidatingTransport",
    "Contract",
    "ContractError",
    "Exchange",
    "Secrets",
    "ValidatingTransport",
    "gold_pattern",
    "load_truths",
]
