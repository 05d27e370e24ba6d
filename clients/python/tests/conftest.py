"""Fixtures: a live ``medgym env serve`` (bin/medgym, embedded JetStream, the real sandbox and verifier) on a free
loopback port with its own state and trajectory store, and reference episodes played by ``medgym run``.

Every client the fixtures hand out (``client``, ``Server.client()``, ``Server.async_client()``) talks through a
validating transport (contract.py): each response is checked against the server's own /openapi.json and searched for
the gold answers of the TREQS tasks the test plays (read from the library's verifier tree); a mismatch or a leak
fails the test at once, and the autouse ``contract_failures`` check fails a test in which a client swallowed one.

Environment: MEDGYM_BIN (default <repo>/bin/medgym, built by ``make build``), MEDGYM_LIBRARY (default
<repo>/build/library, ``make library``). ``make test-env`` sets both and runs this suite.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    import medgym
    from contract import Contract, ValidatingTransport

ROOT = Path(__file__).resolve().parents[3]
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

# The dataset and split the tests play: TREQS tasks are short SQL questions whose reference solution is one
# validate_code action.
DATASET, SPLIT = "treqs", "train"


def medgym_bin() -> Path:
    b = Path(os.environ.get("MEDGYM_BIN", ROOT / "bin" / "medgym"))
    if not b.is_file():
        pytest.fail(f"{b} is missing: run `make build` (or set MEDGYM_BIN)")
    return b


def library() -> Path:
    lib = Path(os.environ.get("MEDGYM_LIBRARY", ROOT / "build" / "library"))
    if not (lib / "agent").is_dir():
        pytest.fail(f"no task library at {lib}: run `make library` (or set MEDGYM_LIBRARY)")
    return lib


def verifier_tree() -> Path:
    """The library's verifier tree (ground truths: <dataset>/<split>.jsonl); only the tests read it, never a session."""
    return library() / "verifier"


# The suite's servers and reference run take end_on both: its tests were written for episodes that end on the first
# accepted code run (a reference solution is one step). medgym's default rule, end_on answer (no code run checked
# before the agent commits), is tested against the real server in the Go suite (systemtest/oracle_test.go); the
# tests here that do not depend on the rule hold under both.
LEGACY_RULE = ("--end-on", "both")

# Every Contract a server made, for the autouse check.
CONTRACTS: list["Contract"] = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running ``medgym env serve``."""

    url: str
    store: Path
    state: Path
    log: Path
    args: list[str]
    proc: subprocess.Popen | None = None
    env: dict[str, str] = field(default_factory=dict)
    checked: bool = True
    contract: "Contract | None" = field(default=None, repr=False)

    def start(self, timeout: float = 180.0) -> "Server":
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"medgym env serve exited with {self.proc.returncode}:\n{self.log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    if self.checked and self.contract is None:
                        # The document this server serves (the one every response is checked against). Imported
                        # here: the adapter venvs (scripts/test-adapters.sh), whose servers are unchecked, lack jsonschema.
                        from contract import Contract

                        doc = httpx.get(f"{self.url}/openapi.json", timeout=10).raise_for_status().json()
                        self.contract = Contract(doc, verifier=verifier_tree())
                        CONTRACTS.append(self.contract)
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"medgym env serve did not answer /healthz in {timeout}s:\n{self.log.read_text()[-4000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def transport(self) -> "ValidatingTransport":
        """An httpx transport that checks every response against this server's document."""
        from contract import ValidatingTransport

        assert self.contract is not None, "the server is not started, or started unchecked"
        return ValidatingTransport(self.contract)

    def client(self, url: str | None = None, **kw: Any) -> "medgym.Client":
        """A medgym.Client of this server (or of url, a proxy in front of it) whose responses are checked."""
        import medgym

        return medgym.Client(url or self.url, transport=self.transport(), **kw)

    def async_client(self, **kw: Any) -> "medgym.AsyncClient":
        """A medgym.AsyncClient of this server whose responses are checked."""
        import medgym
        from contract import AsyncValidatingTransport

        assert self.contract is not None, "the server is not started, or started unchecked"
        return medgym.AsyncClient(self.url, transport=AsyncValidatingTransport(self.contract), **kw)

    def rows(self, run_id: str) -> list[dict[str, Any]]:
        """The stored trajectory rows of run_id (pyarrow over the store's Parquet)."""
        return read_rows(self.store, run_id)


def read_rows(store: Path, run_id: str) -> list[dict[str, Any]]:
    import pyarrow.dataset as pds

    d = store / "trajectories" / f"run={run_id}"
    if not d.is_dir():
        return []
    files = sorted(str(p) for p in d.rglob("*.parquet"))
    if not files:
        return []
    return pds.dataset(files, format="parquet").to_table().to_pylist()


def start_server(tmp: Path, *extra: str, env: dict[str, str] | None = None, checked: bool = True) -> Server:
    """A ``medgym env serve`` over tmp's state and store with the extra flags; checked: its clients (Server.client)
    check every response against its /openapi.json and the verifier tree's gold answers (contract.py)."""
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    args = [
        str(medgym_bin()), "env", "serve",
        "--addr", f"127.0.0.1:{port}",
        "--store", str(tmp / "store"),
        "--state", str(tmp / "state"),
        "--library", str(library()),
        "--dataset", DATASET,
        *LEGACY_RULE,
        *extra,
    ]  # fmt: skip
    e = dict(os.environ)
    e.update(env or {})
    return Server(f"http://127.0.0.1:{port}", tmp / "store", tmp / "state", tmp / "server.log", args, env=e, checked=checked).start()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    """One server for the whole suite (tests use their own run ids, so their rows never mix)."""
    s = start_server(tmp_path_factory.mktemp("env-serve"))
    yield s
    s.stop()


@pytest.fixture
def client(server):
    """A medgym.Client of the suite's server, every response checked (see Server.client)."""
    with server.client() as c:
        yield c


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "call":
        item.stash[CALL_REPORT] = report
    return report


CALL_REPORT = pytest.StashKey[pytest.TestReport]()


@pytest.fixture(autouse=True)
def contract_failures(request: pytest.FixtureRequest):
    """Fail a test during which any checked response failed, even where the test (or the code under test) caught
    the ContractError its client raised (one the test's own failure already shows is not reported twice)."""
    seen = {id(c): len(c.failures) for c in CONTRACTS}
    yield
    new = [f for c in CONTRACTS for f in c.failures[seen.get(id(c), 0) :]]
    call = request.node.stash.get(CALL_REPORT, None)
    if call is not None and call.failed:
        shown = str(call.longrepr)
        new = [f for f in new if f not in shown]
    if new:
        pytest.fail("responses that do not match the API's document:\n" + "\n".join(new), pytrace=False)


def play_reference(tmp: Path, limit: int, *extra: str) -> list[dict[str, Any]]:
    """The first ``limit`` TREQS train tasks played by ``medgym run --policy reference`` (``extra``: more flags):
    their stored rows."""
    args = [
        str(medgym_bin()), "run",
        "--dataset", DATASET, "--split", SPLIT, "--limit", str(limit),
        "--policy", "reference",
        "--store", str(tmp / "store"), "--state", str(tmp / "state"),
        "--library", str(library()),
        "--run-id", "reference",
        *extra,
    ]  # fmt: skip
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"medgym run failed:\n{out.stdout}\n{out.stderr}"
    rows = read_rows(tmp / "store", "reference")
    assert len(rows) == limit, f"medgym run stored {len(rows)} rows, want {limit}"
    return rows


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Two TREQS train tasks played by ``medgym run --policy reference``: their stored rows (prompt, reply)."""
    rows = play_reference(tmp_path_factory.mktemp("reference"), 2, *LEGACY_RULE)
    assert all(r["outcome"] == "correct" for r in rows), [r["outcome"] for r in rows]
    return sorted(rows, key=lambda r: r["task_id"])


def reference_action(row: dict[str, Any]) -> dict[str, Any]:
    """The reference policy's first reply of a stored row, decoded: {"action": ..., "params": {...}}."""
    reply = next(m["content"] for m in row["messages"] if m["role"] == "assistant")
    return json.loads(reply)


def prompt_of(row: dict[str, Any]) -> list[dict[str, str]]:
    """The prompt (system and first user message) of a stored row."""
    msgs = [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
    first_assistant = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    return msgs[:first_assistant]


def run_id(name: str) -> str:
    """A run id unique to one test."""
    return f"pytest-{name}-{os.getpid()}-{time.time_ns() % 10**9}"


__all__ = ["DATASET", "SPLIT", "Server", "prompt_of", "read_rows", "reference_action", "run_id", "start_server", "verifier_tree"]

