"""Live parts the framework adapters' tests play against (imported by the test_adapter_*.py files):

- ``medgym_server``: $MEDGYM_URL (with its store $MEDGYM_STORE) when the make stage started a server, else a
  ``bin/medgym env serve`` started by the client suite's conftest (``start_server``) offering DATASET;
- ``fake_model``: ``bin/medgym fake-llm --policy reference --p-correct 1``, an OpenAI-compatible test model that replies
  with each task's reference solution (the model side: the adapters and the frameworks are the real ones);
- helpers: the model's reply to a conversation, the trajectory rows a run stored, the export of a few tasks.

``MEDGYM_REQUIRE=<framework>`` (the make stage sets it for the venv it runs in) turns a missing framework into a failure
instead of a skip, so a stage whose venv lost its framework cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from conftest import ROOT, free_port, medgym_bin, read_rows, start_server

DATASET = "medcalcbench"
SPLIT = "test"


def framework(name: str, module: str):
    """Import a framework's module, skipping the test file when it is not installed (failing under MEDGYM_REQUIRE)."""
    required = name in os.environ.get("MEDGYM_REQUIRE", "").split(",")
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        if required:
            raise
        pytest.skip(f"{name} is not installed in this venv ({e}); make test-adapters runs it in its own venv", allow_module_level=True)


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def chatml_tokenizer():
    """A byte-level tokenizer built here (nothing downloaded; every text round-trips through its ids) with ChatML's
    markers as single special tokens, the close being the EOS (as Qwen's): a generation ends with it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE({c: i for i, c in enumerate(sorted(alphabet))}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    t = PreTrainedTokenizerFast(tokenizer_object=tok)
    t.add_special_tokens({"eos_token": "<|im_end|>", "additional_special_tokens": ["<|im_start|>"]})
    t.chat_template = CHATML
    return t


def hesitant_reply(model_url: str, transcript: str) -> str:
    """The reference model's continuation of a rendered ChatML transcript, after one reply that is no action (so every
    episode takes two turns, the environment's feedback between two generations)."""
    if transcript.count("<|im_start|>assistant") == 1:
        return "Let me think about it first."
    return model_reply(model_url, [{"role": "user", "content": transcript}])


def _wait(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not come up in {timeout}s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="session")
def medgym_server(tmp_path_factory):
    """(url, store dir) of a live `medgym env serve`: $MEDGYM_URL (store $MEDGYM_STORE) when given, else one started
    here by the client suite's conftest (offering DATASET)."""
    if os.environ.get("MEDGYM_URL"):
        yield os.environ["MEDGYM_URL"].rstrip("/"), os.environ.get("MEDGYM_STORE")
        return
    # Unchecked: the frameworks' own clients talk to it, and these venvs have no jsonschema (contract.py).
    srv = start_server(tmp_path_factory.mktemp("adapters-env-serve"), "--dataset", DATASET, checked=False)
    try:
        yield srv.url, str(srv.store)
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def fake_model():
    """Base URL (…/v1) of the reference-policy test model."""
    tmp = Path(tempfile.mkdtemp(prefix="medgym-fake-llm-"))
    port = free_port()
    log = tmp / "fake.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(medgym_bin()), "fake-llm", "--addr", f"127.0.0.1:{port}", "--policy", "reference", "--p-correct", "1",
             "--dataset", DATASET],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait(url + "/models", proc, log)
        yield url
    finally:
        proc.terminate()
        proc.wait(20)
        shutil.rmtree(tmp, ignore_errors=True)


def model_reply(model_url: str, messages: list[dict]) -> str:
    """The test model's reply to a conversation (what a framework's generation step would produce)."""
    r = httpx.post(model_url + "/chat/completions", json={"model": "medgym-fake", "messages": messages}, timeout=60)
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def stored_rows(store: str | None, run_id: str) -> list[dict]:
    """The trajectory rows run_id stored."""
    if not store:
        pytest.fail("the server's store is unknown: set MEDGYM_STORE with MEDGYM_URL")
    return read_rows(Path(store), run_id)


def wait_rows(store: str | None, run_id: str, n: int, timeout: float = 60) -> list[dict]:
    """The rows of run_id once there are at least n (the verifier writes a row before it answers done; a close may
    still be in flight)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = stored_rows(store, run_id)
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def export(tmp: Path, limit: int = 2) -> Path:
    """`medgym export` of the first `limit` tasks of DATASET/SPLIT into tmp."""
    subprocess.run([str(medgym_bin()), "export", "--dataset", DATASET, "--split", SPLIT, "--limit", str(limit),
                    "--out", str(tmp)], check=True, cwd=ROOT, capture_output=True)
    return tmp


def first_task_ids(url: str, n: int = 2) -> list[str]:
    r = httpx.get(url + "/v1/tasks", params={"dataset": DATASET, "split": SPLIT, "limit": n}, timeout=30)
    r.raise_for_status()
    return [t["id"] for t in r.json()["tasks"]]


def no_gold(obj) -> None:
    """Fail when a response the adapter returned holds the answer key's marker words (a cheap guard; the server's
    canary tests are the real check)."""
    text = json.dumps(obj, default=str)
    assert not re.search(r'"(ground_truth_answer|gold_sql|reference_solution)"', text), text[:500]


@pytest.fixture(scope="session")
def streaming_model(fake_model):
    """Base URL (…/v1) of the reference test model answering streamed chat completions too (server-sent events, as a
    hosted model does; the fake answers whole responses only): a relay in this process that asks the fake for the
    whole response and streams it back as OpenAI's chunks (the content in one delta, then the finish and the usage).
    Like :func:`hesitant_reply`, a conversation's first reply is no action, so every episode takes two turns."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Relay(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            r = httpx.get(fake_model + self.path.removeprefix("/v1"), timeout=60)
            self._send(r.status_code, r.content, r.headers.get("content-type", "application/json"))

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            stream = body.pop("stream", False)
            body.pop("stream_options", None)
            r = httpx.post(fake_model + self.path.removeprefix("/v1"), json=body, timeout=120)
            if r.status_code == 200 and not any(m.get("role") == "assistant" for m in body.get("messages") or []):
                whole = r.json()
                whole["choices"][0]["message"]["content"] = "Let me think about it first."
                r = httpx.Response(200, json=whole)
            if not stream or r.status_code != 200:
                self._send(r.status_code, r.content, r.headers.get("content-type", "application/json"))
                return
            whole = r.json()
            choice = whole["choices"][0]
            head = {k: whole[k] for k in ("id", "created", "model") if k in whole} | {"object": "chat.completion.chunk"}
            chunks = [
                {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": choice["message"].get("content") or ""},
                                      "finish_reason": None}]},
                {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"}]},
                {**head, "choices": [], "usage": whole.get("usage")},
            ]
            data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
            self._send(200, data, "text/event-stream")

        def _send(self, status, data, ctype):
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()
